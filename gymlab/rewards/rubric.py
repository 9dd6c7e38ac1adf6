"""Rubrics: a reward made of named, weighted components, each value kept on the record (docs/rewards.md)."""

from __future__ import annotations

import asyncio
import inspect
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Any

from gymlab.errors import AnswerError, GymlabError, WorkBudgetExceeded, WorkerDied
from gymlab.protocol.failure_kinds import Failure

#: The key of a step's ``info`` (and of a verify response) that holds the component values.
COMPONENTS_KEY = "reward_components"
#: The key of a verify response that holds the judges' requests and verdicts.
JUDGEMENTS_KEY = "judgements"


class ComponentFailed(GymlabError):
    """Raised by a component whose grader failed; the episode is masked with ``failure``."""

    def __init__(self, failure: Failure, judgement: dict[str, Any] | None = None):
        super().__init__(failure.message)
        self.failure = failure
        self.judgement = judgement


@dataclass(frozen=True)
class Component:
    """One named, weighted part of a reward: ``fn(body)`` returns a number; ``gate`` names a component it pays with."""

    name: str
    fn: Callable[[Any], float | bool | Awaitable[float | bool]]
    weight: float = 1.0
    gate: str | None = None

    async def evaluate(self, body: Any) -> tuple[float, dict[str, Any] | None]:
        """The component's value and, for a judge, what it asked and answered."""
        value = self.fn(body)
        if inspect.isawaitable(value):
            value = await value
        return finite_reward(value, f"component {self.name!r}"), None


@dataclass
class Score:
    """What a rubric made of one episode (or step)."""

    reward: float
    components: dict[str, float | None]
    weights: dict[str, float]
    judgements: list[dict[str, Any]] = field(default_factory=list)
    failure: Failure | None = None

    @property
    def masked(self) -> bool:
        return self.failure is not None

    def verify_fields(self) -> dict[str, Any]:
        """The verify-response fields: reward, components, judgements and, when masked, the failure."""
        fields: dict[str, Any] = {"reward": self.reward, COMPONENTS_KEY: dict(self.components)}
        if self.judgements:
            fields[JUDGEMENTS_KEY] = list(self.judgements)
        if self.failure is not None:
            fields.update(masked_fields(self.failure.kind, self.failure.message))
        return fields

    def info(self, **extra: Any) -> dict[str, Any]:
        """A Gymnasium step's ``info``: the components (and the failure fields, which ``/step`` lifts out)."""
        fields = self.verify_fields()
        fields.pop("reward")
        return {**extra, **fields}


class Rubric:
    """Named, weighted components (``Component``/``Judge`` or ``name=fn``); the reward is their weighted sum."""

    def __init__(self, *components: Component, **functions: Callable[[Any], Any]):
        parts = [*components, *(Component(name, fn) for name, fn in functions.items())]
        names = [c.name for c in parts]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"a rubric's component names must be unique; repeated: {', '.join(duplicates)}")
        if not parts:
            raise ValueError("a rubric needs at least one component")
        for c in parts:
            if _gate(c) is not None and (_gate(c) == c.name or _gate(c) not in names):
                raise ValueError(f"component {c.name!r} is gated by {_gate(c)!r}, which is no other component here")
        self.components: tuple[Component, ...] = tuple(parts)

    @property
    def weights(self) -> dict[str, float]:
        return {c.name: c.weight for c in self.components}

    def __getitem__(self, name: str) -> Component:
        for c in self.components:
            if c.name == name:
                return c
        raise KeyError(f"no component {name!r} in this rubric; it has {', '.join(self.weights)}")

    def with_weights(self, **weights: float) -> Rubric:
        """A copy with some components' weights changed (``rubric.with_weights(format=0.5)``)."""
        for name in weights:
            self[name]  # raises a KeyError naming the known components
        return Rubric(*(replace(c, weight=float(weights.get(c.name, c.weight))) for c in self.components))

    def with_component(self, component: Component) -> Rubric:
        """A copy with ``component`` added (or replacing the one of the same name)."""
        kept = [c for c in self.components if c.name != component.name]
        return Rubric(*kept, component)

    def without(self, *names: str) -> Rubric:
        """A copy without the named components."""
        for name in names:
            self[name]
        return Rubric(*(c for c in self.components if c.name not in names))

    async def score(self, body: Any) -> Score:
        """Run every component concurrently; a failed judge masks the score, the others keep their values."""
        results = await asyncio.gather(*(c.evaluate(body) for c in self.components), return_exceptions=True)
        if errors := [r for r in results if isinstance(r, BaseException) and not isinstance(r, ComponentFailed)]:
            raise errors[0]  # the environment's own grading code failed: its server answers verifier_error
        pairs = [(None, r.judgement) if isinstance(r, ComponentFailed) else r for r in results]
        raw = {c.name: value for c, (value, _) in zip(self.components, pairs)}
        components = dict(raw)
        for c in self.components:  # a gate without a value (its judge failed) leaves the masked value as it is
            if (gate := _gate(c)) is not None and raw[c.name] is not None and raw[gate] is not None:
                components[c.name] = raw[c.name] * raw[gate]
        failure = next((r.failure for r in results if isinstance(r, ComponentFailed)), None)
        weights = self.weights
        reward = 0.0 if failure else math.fsum(weights[n] * v for n, v in components.items())
        return Score(reward, components, weights, [j for _, j in pairs if j is not None], failure)

    async def verify(self, body: Any, response_model: type[Any] | None = None, **extra: Any) -> Any:
        """The verify response for ``body``: every field of the body echoed, plus the score's fields."""
        score = await self.score(body)
        return verify_answer(body, {**extra, **score.verify_fields()}, response_model)

    def __repr__(self) -> str:
        parts = ", ".join(
            f"{c.name}={c.weight:g}{' (judge)' if type(c).__name__ == 'Judge' else ''}"
            f"{f' (if {_gate(c)})' if _gate(c) else ''}"
            for c in self.components
        )
        return f"<Rubric {parts}>"


def _gate(component: Component) -> str | None:
    return getattr(component, "gate", None)  # a Judge has none


def finite_reward(value: Any, who: str) -> float:
    """``value`` as a float when it is a finite number or a bool, else a ``TypeError`` naming ``who``."""
    if isinstance(value, (int, float)) and math.isfinite(value):  # a bool too
        return float(value)
    raise TypeError(f"{who} must return a finite number or a bool, got {value!r:.100}")


#: What grading code may raise and still be answered: the model's own answer, or the worker that graded it.
GRADING_FAILURES = (AnswerError, WorkBudgetExceeded, WorkerDied)


def verify_answer(body: Any, fields: dict[str, Any], model: type[Any] | None = None) -> Any:
    """A verify answer (``model``, else ``BaseVerifyResponse``) echoing every field of ``body``, then ``fields``."""
    from gymlab.protocol.resources import BaseVerifyResponse

    echoed = body.model_dump(mode="json") if hasattr(body, "model_dump") else dict(body)
    return (model or BaseVerifyResponse).model_validate({**echoed, **fields})


def masked_fields(kind: str, reason: str) -> dict[str, Any]:
    """The fields of a masked verify or step answer: infrastructure failed (``kind``), not the task."""
    return {"mask_sample": True, "failure_kind": kind, "failure_reason": reason}


def grading_failure(exc: BaseException) -> dict[str, Any]:
    """The answer's fields for one of ``GRADING_FAILURES``: an ``AnswerError`` is the model's own 0, unmasked;
    a worker that ran past its budget or died is masked (``verifier_error``)."""
    if isinstance(exc, AnswerError):
        return {"answer_error": str(exc)}
    return masked_fields("verifier_error", str(exc))
