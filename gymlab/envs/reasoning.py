"""reasoning-gym's procedural datasets as rows, graded by each dataset's own ``score_answer`` against the entry
its spec (dataset, config, index) generates again, not the row's JSON copy (docs/envs.md)."""

from __future__ import annotations

import dataclasses
import gc
import json
import math
import types
import typing
from collections import OrderedDict
from typing import Any, ClassVar

from fastapi import HTTPException
from pydantic import BaseModel, Field, PrivateAttr

from gymlab._runtime.offload import rss_bytes
from gymlab.envs.extras import need
from gymlab.envs.gym_env import plain
from gymlab.errors import WorkBudgetExceeded, WorkerDied
from gymlab.protocol import BaseVerifyRequest, BaseVerifyResponse
from gymlab.resources.simple import SimpleResourcesServer, masked_verification
from gymlab.resources.tools import rows_from

MAX_ITEMS = 1000  # items of a list or dict value
MAX_CHARS = 1000  # characters of a string value
MAX_COMPOSITE = 64  # datasets one composite spec mixes


class DatasetRef(BaseModel):
    """Which entry a row is: reasoning-gym's dataset name, its config (``size`` and ``seed`` too), the index."""

    dataset: str
    config: dict[str, Any] = Field(default_factory=dict)
    index: int = Field(ge=0)


class ReasoningGymVerify(BaseVerifyRequest):
    reasoning_gym: DatasetRef
    answer: Any = None  # the row's copy of the entry's answer, checked against the generated one


class ReasoningGymServer(SimpleResourcesServer):
    """Seed/verify over any reasoning-gym dataset, graded in worker processes (docs/envs.md)."""

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
        try:
            check_config(
                ref.dataset, ref.config, "config", self, issued=spec_key(ref.dataset, ref.config) in self._issued
            )
            if isinstance(size := ref.config.get("size"), int) and ref.index >= size:  # before anything is built
                raise SpecError(f"index: {ref.index} is past {ref.dataset}'s size {size}")
            graded = await self._grade(ref, body.response.output_text)
        except SpecError as exc:
            raise HTTPException(422, f"{self.name}: reasoning_gym.{exc}") from None
        except (WorkBudgetExceeded, ScoreError) as exc:
            if getattr(exc, "stage", None) == "prepare":
                return masked_verification(body, "verifier_error", f"{exc}: building {ref.dataset} from {ref.config}")
            try:  # the entry grades with an empty answer: this answer's failure (its 0); else the grader's (masked)
                graded = await self._grade(ref, "")
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

    async def _grade(self, ref: DatasetRef, text: str) -> dict[str, Any]:
        """``grade`` in a worker, the dataset built there first (within ``build_budget_seconds``)."""
        cache = (self.max_cache_bytes, self.max_datasets)
        return await self.worker_pool().run(
            grade,
            ref.dataset,
            ref.config,
            ref.index,
            cache,
            text,
            self.max_answer_chars,
            budget_s=self.work_budget_seconds,
            prepare=(_dataset, ref.dataset, ref.config, cache),
            prepare_s=self.build_budget_seconds,
        )


def build(name: str, config: dict[str, Any]) -> Any:
    """``reasoning_gym.create_dataset(name, **config)`` (a ``composite``'s ``datasets`` may be plain dicts)."""
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
    """In a worker: ``reward`` of ``text`` for entry ``index`` of ``(name, config)`` and the entry's ``answer``."""
    dataset = _dataset(name, config, cache)
    if index >= len(dataset):
        raise SpecError(f"index: {index} is past {name}'s size {len(dataset)}")
    entry = dataset[index]
    graded: dict[str, Any] = {"answer": plain(entry["answer"])}
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
    """reasoning-gym's ``extract_answer`` in one pass (its regex is quadratic in unclosed tags)."""
    found, at = None, 0
    while (start := text.find("<answer>", at)) >= 0:
        end = text.find("</answer>", start + 8)
        if end < 0:
            break
        found, at = (start + 8, end), end + 9
    return None if found is None else text[found[0] : found[1]].strip()


def reasoning_gym(
    name: str, *, size: int = 8, seed: int = 0, system_prompt: str | None = "default", **config: Any
) -> tuple[ReasoningGymServer, list[dict[str, Any]]]:
    """``(server, rows)``: ``size`` entries of reasoning-gym's dataset ``name`` from ``seed``, ``config`` its
    fields (the arguments: docs/envs.md)."""
    spec = {"size": size, "seed": seed, **config}
    dataset = build(name, spec)
    from reasoning_gym.utils import SYSTEM_PROMPTS

    entries = [dataset[i] for i in range(len(dataset))]
    rows = rows_from(
        [e["question"] for e in entries],
        instructions=SYSTEM_PROMPTS.get(system_prompt, system_prompt) if system_prompt else None,
        question=[e["question"] for e in entries],
        answer=[plain(e["answer"]) for e in entries],
        metadata=[plain(e["metadata"]) for e in entries],
        reasoning_gym=[{"dataset": name, "config": plain(spec), "index": i} for i in range(len(entries))],
    )
    server = ReasoningGymServer(name="reasoning_gym")
    server.issue(name, plain(spec))
    return server, rows


def datasets() -> list[str]:
    """The names of reasoning-gym's registered datasets."""
    need("reasoning_gym")
    from reasoning_gym.factory import DATASETS

    return sorted(DATASETS)


# -- a spec from a request: within bounds before anything is built (docs/envs.md)


class SpecError(ValueError):
    """A spec from a request that the server will not build: the message names the field first."""


def spec_key(name: str, config: dict[str, Any]) -> str:
    """The spec's identity (its JSON, keys sorted)."""
    return json.dumps([name, config], sort_keys=True, default=str)


def check_config(name: Any, config: Any, where: str, server: Any, *, issued: bool) -> None:
    """``SpecError`` naming the first field of ``config`` out of bounds or of the wrong type."""
    from reasoning_gym.factory import DATASETS

    if not isinstance(name, str) or name not in DATASETS:
        known = ", ".join(sorted(DATASETS)[:12])
        raise SpecError(
            f"{where.rsplit('config', 1)[0]}dataset: no reasoning-gym dataset {name!r:.80} (e.g. {known}, ...)"
        )
    if not isinstance(config, dict):
        raise SpecError(f"{where}: a config is an object of {name}'s fields, got {type(config).__name__}")
    cls = DATASETS[name][1]
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    for key, value in config.items():
        path = f"{where}.{key}"
        if key not in fields:
            raise SpecError(f"{path}: {name} has no field {key!r:.80}; its fields: {', '.join(fields)}")
        if key == "size":
            if not _whole(value) or not 1 <= value <= server.max_size:
                raise SpecError(f"{path}: a whole number from 1 to {server.max_size} (max_size), got {value!r:.80}")
        elif key == "seed":
            if value is not None and (not _whole(value) or abs(value) >= 2**63):
                raise SpecError(f"{path}: a whole number (under 2**63) or null, got {value!r:.80}")
        elif key == "datasets" and name == "composite":
            _check_composite(value, path, server, issued=issued)
        elif value == _default(fields[key]):
            continue  # the dataset's own default, as JSON (a few defaults do not match their annotations)
        else:
            limit = None if issued else _limit(fields[key], server.max_config_scale)
            _check_value(value, hints.get(key, Any), path, limit)


def _check_composite(value: Any, path: str, server: Any, *, issued: bool) -> None:
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_COMPOSITE:
        raise SpecError(f"{path}: a list of 1 to {MAX_COMPOSITE} dataset specs, got {value!r:.80}")
    for i, spec in enumerate(value):
        here = f"{path}[{i}]"
        if (
            not isinstance(spec, dict)
            or not isinstance(spec.get("name"), str)
            or set(spec) - {"name", "weight", "config"}
        ):
            raise SpecError(f"{here}: an object with name, weight and config, got {spec!r:.80}")
        weight = spec.get("weight", 1)
        if not _number(weight) or not 0 < weight <= 1e6:
            raise SpecError(f"{here}.weight: a number above 0 (at most 1e6), got {weight!r:.80}")
        check_config(spec["name"], spec.get("config", {}), f"{here}.config", server, issued=issued)


def _limit(field: dataclasses.Field, scale: float) -> float | None:
    """The largest magnitude a numeric field may take: ``scale`` times its default's (at least 10)."""
    default = field.default
    numbers = (
        [default] if _number(default) else [v for v in default if _number(v)] if isinstance(default, tuple) else []
    )
    return scale * max([10.0, *(abs(v) for v in numbers)]) if numbers or default is None else None


def _default(field: dataclasses.Field) -> Any:
    """A field's default as JSON reads it back (``MISSING`` when it has none)."""
    if field.default is not dataclasses.MISSING:
        return plain(field.default)
    if field.default_factory is not dataclasses.MISSING:
        return plain(field.default_factory())
    return dataclasses.MISSING


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    """A finite number: any whole number (never converted to a float: it may be past one), a finite float."""
    return _whole(value) or isinstance(value, float) and math.isfinite(value)


def _check_value(value: Any, hint: Any, path: str, limit: float | None) -> None:
    """``SpecError`` unless ``value`` is of type ``hint`` (numbers within ``limit``, containers short)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _check_value(value, arg, path, limit)
            except SpecError as exc:
                errors.append(exc)
        raise errors[0] if errors else SpecError(f"{path}: null is not allowed here")
    if origin is typing.Literal:
        if value not in args:
            raise SpecError(f"{path}: one of {', '.join(map(repr, args))}, got {value!r:.80}")
        return
    if hint is bool:
        if not isinstance(value, bool):
            raise SpecError(f"{path}: true or false, got {value!r:.80}")
        return
    if hint in (int, float):
        ok = _whole(value) if hint is int else _number(value)
        if not ok:
            raise SpecError(f"{path}: a {'whole number' if hint is int else 'number'}, got {value!r:.80}")
        if limit is not None and abs(value) > limit:
            raise SpecError(
                f"{path}: at most {limit:g} in size (max_config_scale times its default), got {value!r:.80}"
            )
        return
    if hint is str:
        if not isinstance(value, str) or len(value) > MAX_CHARS:
            raise SpecError(f"{path}: a string of at most {MAX_CHARS} characters, got {value!r:.80}")
        return
    container = origin or hint
    if container in (list, tuple, set, frozenset) or container is typing.Sequence:
        if not isinstance(value, list) or len(value) > MAX_ITEMS:
            raise SpecError(f"{path}: a list of at most {MAX_ITEMS} items, got {value!r:.80}")
        fixed = container is tuple and len(args) > 1 and args[-1] is not Ellipsis
        if fixed and len(value) != len(args):
            raise SpecError(f"{path}: a list of {len(args)} items, got {value!r:.80}")
        for i, item in enumerate(value):
            _check_value(item, (args[i] if fixed else args[0]) if args else Any, f"{path}[{i}]", limit)
        return
    if container is dict:
        if not isinstance(value, dict) or len(value) > MAX_ITEMS:
            raise SpecError(f"{path}: an object of at most {MAX_ITEMS} keys, got {value!r:.80}")
        return
    if isinstance(value, (list, dict)) and len(value) > MAX_ITEMS:  # a type not named here: the build judges it
        raise SpecError(f"{path}: at most {MAX_ITEMS} items, got {len(value)}")
