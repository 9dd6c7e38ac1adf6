"""reasoning-gym's procedural datasets as rows, graded by each dataset's own ``score_answer`` against the entry
its spec (dataset, config, index) generates again, not the row's JSON copy (docs/envs.md)."""

from __future__ import annotations

import dataclasses
import gc
import json
from collections import OrderedDict
from typing import Any, ClassVar

from fastapi import HTTPException
from pydantic import BaseModel, Field, PrivateAttr

from gymlab._runtime.offload import rss_bytes
from gymlab.envs.extras import need
from gymlab.envs.reasoning_specs import SpecError, check_spec, spec_key
from gymlab.errors import WorkBudgetExceeded, WorkerDied
from gymlab.protocol import BaseVerifyRequest, BaseVerifyResponse
from gymlab.resources.simple import SimpleResourcesServer, masked_verification
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
    """Seed/verify over any reasoning-gym dataset, graded in worker processes; a spec from a request is checked
    against bounds before anything is built, the specs of the rows it made are its own (docs/envs.md)."""

    work_budget_seconds: float = Field(10.0, gt=0, description="Time budget of grading one answer (not the build).")
    build_budget_seconds: float = Field(60.0, gt=0, description="Time budget of building one dataset in a worker.")
    max_size: int = Field(100_000, ge=1, description="Largest ``size`` of a spec from a request.")
    max_config_scale: float = Field(10.0, ge=1, description="A numeric field's bound: this times its default (>= 10).")
    max_datasets: int = Field(32, ge=1, description="Datasets one worker keeps built (and within max_cache_bytes).")
    max_cache_bytes: int = Field(256 << 20, ge=0, description="Memory one worker keeps for built datasets (LRU).")
    max_answer_chars: int = Field(16 << 10, ge=1, description="Longest final answer scored (longer: a 0).")
    _issued: set = PrivateAttr(default_factory=set)
    not_episode_state: ClassVar[tuple[str, ...]] = ("_issued",)  # the specs of the rows this server made

    def issue(self, name: str, config: dict[str, Any]) -> None:
        """Vouch for the spec ``(name, config)``: rows this server made carry it, so its fields go unbounded."""
        self._issued.add(spec_key(name, config))

    async def verify(self, body: ReasoningGymVerify) -> BaseVerifyResponse:
        ref = body.reasoning_gym
        spec = (ref.dataset, ref.config, ref.index, (self.max_cache_bytes, self.max_datasets))
        try:
            check_spec(ref, self, issued=spec_key(ref.dataset, ref.config) in self._issued)
            graded = await self._grade(spec, body.response.output_text)
        except SpecError as exc:
            raise HTTPException(422, f"{self.name}: reasoning_gym.{exc}") from None
        except (WorkBudgetExceeded, ScoreError) as exc:
            if getattr(exc, "stage", None) == "prepare":
                return masked_verification(body, "verifier_error", f"{exc}: building {ref.dataset} from {ref.config}")
            try:  # the entry grades with an empty answer: this answer's failure (its 0); else the grader's (masked)
                graded = await self._grade(spec, "")
                graded.update(reward=0.0, answer_error=f"grading this answer failed: {exc}")
            except (WorkBudgetExceeded, ScoreError, WorkerDied):
                return masked_verification(body, "verifier_error", f"{self.name}: grading failed on any answer: {exc}")
        if body.answer is not None and graded["answer"] != body.answer:
            raise HTTPException(
                422,
                f"{self.name}: the row's answer {body.answer!r:.80} is not {ref.dataset}[{ref.index}]'s "
                f"{graded['answer']!r:.80} (rows made by another reasoning-gym version or an edited row); "
                "make the rows again with gymlab.envs.reasoning_gym",
            )
        extra = {k: graded[k] for k in ("answer_error", "response_too_large") if k in graded}
        return BaseVerifyResponse(**body.model_dump(), reward=graded["reward"], **extra)

    def worker_rss_limit(self) -> int:
        """A worker keeps its datasets within ``max_cache_bytes``; one far past it (a build's leftovers) restarts."""
        return 2 * self.max_cache_bytes + (1 << 30)

    async def _grade(self, spec: tuple, text: str) -> dict[str, Any]:
        """``grade`` in a worker, the dataset built there first (within ``build_budget_seconds``)."""
        name, config, _, cache = spec
        return await self.worker_pool().run(
            grade,
            *spec,
            text,
            self.max_answer_chars,
            budget_s=self.work_budget_seconds,
            prepare=(_dataset, name, config, cache),
            prepare_s=self.build_budget_seconds,
        )


def build(name: str, config: dict[str, Any]) -> Any:
    """``reasoning_gym.create_dataset(name, **config)`` (a ``composite``'s ``datasets`` may be plain dicts);
    a ``LookupError`` naming the known datasets, or a ``ValueError`` naming the fields."""
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


_BUILT: OrderedDict = OrderedDict()  # spec key -> (dataset, the resident bytes its build added)


class ScoreError(RuntimeError):
    """``score_answer`` raised: whose fault it was is settled by grading an empty answer (``verify``)."""


def grade(name: str, config: dict, index: int, cache: tuple, text: str, max_answer_chars: int) -> dict[str, Any]:
    """In a worker: ``reward`` of ``text`` for entry ``index`` of ``(name, config)`` (built once, kept within
    ``cache``), the entry's ``answer`` as JSON, ``response_too_large`` past ``max_answer_chars``."""
    dataset = _dataset(name, config, cache)
    if index >= len(dataset):
        raise SpecError(f"index: {index} is past {name}'s size {len(dataset)}")
    entry = dataset[index]
    graded: dict[str, Any] = {"answer": jsonable(entry["answer"])}
    answer = final_answer(text)
    if answer is not None and len(answer) > max_answer_chars:
        why = f"the final answer is {len(answer)} characters, over this server's max_answer_chars {max_answer_chars}"
        return {**graded, "reward": 0.0, "response_too_large": why}
    try:
        return {**graded, "reward": float(dataset.score_answer(answer, entry))}
    except Exception as exc:
        raise ScoreError(f"{name}'s score_answer raised {type(exc).__name__}: {str(exc)[:300]}") from None


def _dataset(name: str, config: dict, cache: tuple) -> Any:
    """The built dataset, kept least recently used within ``cache``: ``(bytes, datasets)``."""
    cache_bytes, most = cache
    key = spec_key(name, config)
    if key in _BUILT:
        _BUILT.move_to_end(key)
        return _BUILT[key][0]
    before = rss_bytes()
    try:
        dataset = build(name, config)
    except (LookupError, ValueError) as exc:
        raise SpecError(f"config: {exc}") from None
    except Exception as exc:  # the spec made the build fail: the spec's fault, a 4xx
        raise SpecError(f"config: building {name} from {config!r:.200} raised {type(exc).__name__}: {exc}") from None
    _BUILT[key] = (dataset, max(0, rss_bytes() - before))
    while len(_BUILT) > most or (len(_BUILT) > 1 and sum(size for _, size in _BUILT.values()) > cache_bytes):
        _BUILT.popitem(last=False)
    if sum(size for _, size in _BUILT.values()) > cache_bytes:  # one dataset past the cap: not kept
        _BUILT.clear()
    gc.collect()
    return dataset


def cache_report() -> dict[str, int]:
    """This worker's kept datasets and the resident bytes their builds added."""
    return {"datasets": len(_BUILT), "bytes": sum(size for _, size in _BUILT.values())}


def final_answer(text: str) -> str | None:
    """reasoning-gym's ``extract_answer`` (the last ``<answer>...</answer>``, stripped) in one pass, not its
    regex's time quadratic in unclosed tags."""
    found, at = None, 0
    while (start := text.find("<answer>", at)) >= 0:
        end = text.find("</answer>", start + 8)
        if end < 0:
            break
        found, at = (start + 8, end), end + 9
    return None if found is None else text[found[0] : found[1]].strip()


def jsonable(value: Any) -> Any:
    """``value`` as JSON reads it back (tuples become lists, other keys strings, unknown types ``str``)."""
    return json.loads(json.dumps(value, default=str))


def reasoning_gym(
    name: str, *, size: int = 8, seed: int = 0, system_prompt: str | None = "default", **config: Any
) -> tuple[ReasoningGymServer, list[dict[str, Any]]]:
    """``(server, rows)``: ``size`` entries of reasoning-gym's dataset ``name`` from ``seed`` (``config``: its
    fields; ``composite``: ``datasets=[{name, weight, config}]``). ``system_prompt``: a name of
    ``reasoning_gym.utils.SYSTEM_PROMPTS`` (``"default"`` asks for ``<answer>`` tags), your own text, or None."""
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
    server = ReasoningGymServer(name="reasoning_gym")
    server.issue(name, jsonable(spec))
    return server, rows


def datasets() -> list[str]:
    """The names of reasoning-gym's registered datasets."""
    need("reasoning_gym")
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)
