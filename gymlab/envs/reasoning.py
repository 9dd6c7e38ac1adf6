"""reasoning-gym's procedural datasets as rows, graded by each dataset's own ``score_answer``.

A row carries its entry's spec (dataset, config, index); verify generates the entry again and scores
the extracted answer against it, not against the row's JSON copy (docs/envs.md).
"""

from __future__ import annotations

import dataclasses
import json
from collections import OrderedDict
from typing import Any, ClassVar

from fastapi import HTTPException
from pydantic import BaseModel, Field, PrivateAttr

from gymlab.envs.extras import need
from gymlab.protocol import BaseVerifyRequest, BaseVerifyResponse
from gymlab.resources.simple import SimpleResourcesServer
from gymlab.resources.tools import rows_from


class DatasetRef(BaseModel):
    """Which entry a row is: reasoning-gym's dataset name, its config (``size`` and ``seed`` too), the index."""

    dataset: str
    config: dict[str, Any] = Field(default_factory=dict)
    index: int = Field(ge=0)


class ReasoningGymVerify(BaseVerifyRequest):
    reasoning_gym: DatasetRef
    answer: Any = None  # the row's copy of the entry's answer, checked against the generated one


class ReasoningGymServer(SimpleResourcesServer):
    """Seed/verify over any reasoning-gym dataset: the reward is the dataset's ``score_answer``."""

    max_datasets: int = Field(32, ge=1, description="Datasets kept built (keyed by name and config).")
    _built: OrderedDict = PrivateAttr(default_factory=OrderedDict)
    not_episode_state: ClassVar[tuple[str, ...]] = ("_built",)  # a cache of datasets, bounded by max_datasets

    def dataset(self, ref: DatasetRef) -> Any:
        """The dataset ``ref`` names, built once per name and config."""
        key = json.dumps([ref.dataset, ref.config], sort_keys=True)
        if key in self._built:
            self._built.move_to_end(key)
            return self._built[key]
        try:
            built = build(ref.dataset, ref.config)
        except (LookupError, ValueError) as exc:
            raise HTTPException(422, f"{self.name}: {exc}") from None
        self._built[key] = built
        while len(self._built) > self.max_datasets:
            self._built.popitem(last=False)
        return built

    async def verify(self, body: ReasoningGymVerify) -> BaseVerifyResponse:
        ref = body.reasoning_gym
        dataset = self.dataset(ref)
        if ref.index >= len(dataset):
            raise HTTPException(422, f"{self.name}: index {ref.index} is past {ref.dataset}'s size {len(dataset)}")
        entry = dataset[ref.index]
        if body.answer is not None and jsonable(entry["answer"]) != body.answer:
            raise HTTPException(
                422,
                f"{self.name}: the row's answer {body.answer!r:.80} is not {ref.dataset}[{ref.index}]'s "
                f"{jsonable(entry['answer'])!r:.80} (rows made by another reasoning-gym version or an edited row); "
                "make the rows again with gymlab.envs.reasoning_gym",
            )
        from reasoning_gym.utils import extract_answer

        answer = extract_answer(body.response.output_text)
        return BaseVerifyResponse(**body.model_dump(), reward=float(dataset.score_answer(answer, entry)))


def build(name: str, config: dict[str, Any]) -> Any:
    """``reasoning_gym.create_dataset(name, **config)`` (a ``composite``'s ``datasets`` may be plain dicts); an
    unknown name is a ``LookupError`` naming the known ones, a refused config a ``ValueError`` naming its fields."""
    rg = need("reasoning_gym")
    from reasoning_gym.factory import DATASETS

    if name not in DATASETS:
        raise LookupError(
            f"no reasoning-gym dataset {name!r}; there are {len(DATASETS)}: {', '.join(sorted(DATASETS))}"
        )
    kwargs = dict(config)
    if name == "composite":
        from reasoning_gym.composite import DatasetSpec

        kwargs["datasets"] = [
            d if isinstance(d, DatasetSpec) else DatasetSpec(**d) for d in kwargs.get("datasets") or []
        ]
    try:
        return rg.create_dataset(name, **kwargs)
    except (TypeError, ValueError, AssertionError, KeyError) as exc:
        fields = ", ".join(f.name for f in dataclasses.fields(DATASETS[name][1]))
        raise ValueError(f"reasoning-gym dataset {name!r} refused the config {config}: {exc!r}; its fields: {fields}")


def jsonable(value: Any) -> Any:
    """``value`` as JSON reads it back (tuples become lists, other keys strings, unknown types ``str``)."""
    return json.loads(json.dumps(value, default=str))


def reasoning_gym(
    name: str, *, size: int = 8, seed: int = 0, system_prompt: str | None = "default", **config: Any
) -> tuple[ReasoningGymServer, list[dict[str, Any]]]:
    """``(server, rows)`` for reasoning-gym's dataset ``name`` (``composite``: ``datasets=[{name, weight,
    config}]``): ``size`` entries generated from ``seed``, ``config`` the dataset's own fields. ``system_prompt``:
    a name of ``reasoning_gym.utils.SYSTEM_PROMPTS`` (``"default"`` asks for ``<answer>`` tags), your own text,
    or None. One served server grades the rows of every dataset."""
    spec = {"size": size, "seed": seed, **config}
    dataset = build(name, spec)
    from reasoning_gym.utils import SYSTEM_PROMPTS

    entries = [dataset[i] for i in range(len(dataset))]
    rows = rows_from(
        [e["question"] for e in entries],
        instructions=SYSTEM_PROMPTS.get(system_prompt, system_prompt) if system_prompt else None,
        question=[e["question"] for e in entries],
        answer=[jsonable(e["answer"]) for e in entries],
        metadata=[jsonable(e["metadata"]) for e in entries],
        reasoning_gym=[{"dataset": name, "config": jsonable(spec), "index": i} for i in range(len(entries))],
    )
    return ReasoningGymServer(name="reasoning_gym"), rows


def datasets() -> list[str]:
    """The names of reasoning-gym's registered datasets."""
    need("reasoning_gym")
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)
