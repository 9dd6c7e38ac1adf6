"""Model judges: a rubric component that asks a model server for a verdict.

``Judge`` fills a prompt template from the verify body, posts it to any gymlab model server
(``POST /v1/responses``: a ``PolicyModel`` for tests, the OpenAI-compatible proxy for real
models), and parses the answer as a score, a label or a JSON object. Each judge bounds its own
requests per worker (``max_concurrency``, one limit per server event loop, as judge limits are
per worker), each request in time (``timeout_s``) and its retries (``attempts``, with the shared
backoff). A judge that cannot get an answer masks the episode ``judge_failed``; an answer it cannot
read masks it ``judge_unparseable``; never a 0. What it asked and what it answered are kept on the
record (``judgements``).
"""

from __future__ import annotations

import asyncio
import json
import re
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gymlab.client import ask_model_server
from gymlab.errors import ServerError, TransportError
from gymlab.protocol.failure_kinds import Failure
from gymlab.retry import backoff_delay, retrying
from gymlab.rewards.rubric import ComponentFailed

_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


class Unparseable(ValueError):
    """Raised by a verdict parser for an answer that is not a grade."""


def default_fields(body: Any) -> dict[str, Any]:
    """Template fields of a verify body: its own fields (row fields it declares, such as a
    reference answer), ``question`` (the last user message) and ``answer`` (the model's final text)."""
    data = body.model_dump(mode="json") if hasattr(body, "model_dump") else dict(body)
    fields = {k: v for k, v in data.items() if k not in ("responses_create_params", "response")}
    params = getattr(body, "responses_create_params", None)
    users = [i for i in (params.input_items() if params is not None else []) if getattr(i, "role", None) == "user"]
    fields["question"] = users[-1].text if users else ""
    response = getattr(body, "response", None)
    fields["answer"] = response.output_text if response is not None else ""
    return fields


def parse_score(text: str, scale: tuple[float, float] = (0.0, 1.0)) -> float:
    """The last number in ``text`` mapped from ``scale`` to 0..1 (``Unparseable`` when none, or out of range)."""
    numbers = _NUMBER.findall(text)
    if not numbers:
        raise Unparseable(f"no number in the verdict {text[:200]!r}")
    low, high = scale
    value = float(numbers[-1])
    if not low <= value <= high:
        raise Unparseable(f"score {value:g} is outside the scale {low:g}..{high:g}")
    return (value - low) / (high - low)


def parse_label(text: str, labels: Mapping[str, float]) -> float:
    """The value of the one label named in ``text`` (whole words, any case); none or several: ``Unparseable``."""
    found = {
        label for label in labels if re.search(rf"(?<![A-Za-z0-9_]){re.escape(label)}(?![A-Za-z0-9_])", text, re.I)
    }
    if len(found) != 1:
        what = "none" if not found else ", ".join(sorted(found))
        raise Unparseable(f"expected exactly one of {', '.join(labels)} in the verdict, found {what}: {text[:200]!r}")
    return float(labels[found.pop()])


def parse_json(text: str, key: str = "score") -> float:
    """``key`` of the JSON object in ``text`` (the first ``{`` to the last ``}``), as a number or bool."""
    start, end = text.find("{"), text.rfind("}")
    try:
        obj = json.loads(text[start : end + 1]) if 0 <= start < end else None
    except ValueError:
        obj = None
    if not isinstance(obj, dict) or key not in obj:
        raise Unparseable(f"expected a JSON object with {key!r} in the verdict, got {text[:200]!r}")
    value = obj[key]
    if isinstance(value, (int, float)):
        return float(value)
    raise Unparseable(f"{key!r} in the verdict is {value!r}, not a number")


@dataclass(frozen=True, eq=False)
class Judge:
    """A rubric component graded by a model: ``Judge("correct", model, template, labels={"CORRECT": 1, "INCORRECT": 0})``.

    ``model`` is a model server's URL or handle (anything with ``.url``). ``template`` is a
    ``str.format`` template over ``fields(body)`` (default ``default_fields``: the body's fields,
    ``question`` and ``answer``). ``parse`` reads the verdict: ``"score"`` (the last number, mapped
    from ``scale`` to 0..1), ``"label"`` (``labels``: label -> value), ``"json"`` (``json_key`` of a
    JSON object) or a function of the text (raise ``Unparseable`` for a non-grade).
    """

    name: str
    model: Any
    template: str = "{question}\n\n{answer}"
    parse: str | Callable[[str], float] = "score"
    labels: Mapping[str, float] | None = None
    scale: tuple[float, float] = (0.0, 1.0)
    json_key: str = "score"
    system: str | None = None
    model_name: str | None = None
    fields: Callable[[Any], dict[str, Any]] = default_fields
    max_concurrency: int = 8
    timeout_s: float = 60.0
    attempts: int = 3
    backoff_s: float = 0.5
    weight: float = 1.0
    _limits: Any = field(default_factory=weakref.WeakKeyDictionary, init=False, repr=False, compare=False)

    def __post_init__(self):
        if self.model is None:
            raise ValueError(f"judge {self.name!r} needs a model: a model server's URL or handle")
        if self.parse == "label" and not self.labels:
            raise ValueError(f"judge {self.name!r} parses labels: give labels={{'CORRECT': 1, 'INCORRECT': 0}}")
        if isinstance(self.parse, str) and self.parse not in ("score", "label", "json"):
            raise ValueError(f"judge {self.name!r}: parse must be 'score', 'label', 'json' or a function")
        if self.max_concurrency < 1 or self.attempts < 1:
            raise ValueError(f"judge {self.name!r}: max_concurrency and attempts must be at least 1")

    @property
    def url(self) -> str:
        return self.model if isinstance(self.model, str) else self.model.url

    def limit(self) -> asyncio.Semaphore:
        """This worker's bound on the judge's requests in flight (one per event loop)."""
        loop = asyncio.get_running_loop()
        sem = self._limits.get(loop)
        if sem is None:
            sem = self._limits[loop] = asyncio.Semaphore(self.max_concurrency)
        return sem

    def request(self, body: Any) -> dict[str, Any]:
        """The ``/v1/responses`` body this judge sends for ``body``."""
        try:
            prompt = self.template.format(**self.fields(body))
        except KeyError as exc:
            raise KeyError(
                f"judge {self.name!r}: the template names {exc}, which the verify body does not carry; "
                "declare that row field on the environment's verify request model"
            ) from None
        messages = [{"role": "user", "content": prompt}]
        if self.system:
            messages.insert(0, {"role": "system", "content": self.system})
        request: dict[str, Any] = {"input": messages}
        if self.model_name:
            request["model"] = self.model_name
        return request

    def read(self, text: str) -> float:
        """The verdict ``text`` as a value (``Unparseable`` when it is not a grade)."""
        if callable(self.parse):
            return float(self.parse(text))
        if self.parse == "label":
            return parse_label(text, self.labels or {})
        if self.parse == "json":
            return parse_json(text, self.json_key)
        return parse_score(text, self.scale)

    async def evaluate(self, body: Any) -> tuple[float, dict[str, Any]]:
        request = self.request(body)
        judgement: dict[str, Any] = {"component": self.name, "model": self.url, "request": request}

        async def ask() -> Any:
            judgement["attempts"] = judgement.get("attempts", 0) + 1
            return await ask_model_server(self.url, request, server=f"judge {self.name!r}", timeout=self.timeout_s)

        def again(exc: Exception, n: int) -> float | None:
            ok = n < self.attempts and isinstance(exc, ServerError) and _retryable(exc)
            return backoff_delay(self.backoff_s, n) if ok else None

        async with self.limit():
            try:
                response = await retrying(ask, again)
            except ServerError as exc:
                raise self._failed("judge_failed", judgement, f"the judge model failed: {exc}") from exc
        text = response.output_text
        judgement["verdict"] = text
        try:
            value = self.read(text)
        except (Unparseable, ValueError, TypeError) as exc:
            raise self._failed("judge_unparseable", judgement, f"the judge's answer is not a grade: {exc}") from None
        judgement["value"] = value
        return value, judgement

    def _failed(self, kind: str, judgement: dict[str, Any], cause: str) -> ComponentFailed:
        message = f"judge {self.name!r} ({self.url}): {cause}"
        judgement["failure_kind"], judgement["error"] = kind, message
        return ComponentFailed(
            Failure(kind=kind, stage="verification", server=f"judge {self.name}", message=message), judgement
        )


def _retryable(exc: ServerError) -> bool:
    """A transport failure, a 5xx, a 429 or a 200 non-answer is worth another try; a 4xx is not."""
    return isinstance(exc, TransportError) or exc.status >= 500 or exc.status in (200, 408, 429)


__all__ = ["Judge", "Unparseable", "default_fields", "parse_json", "parse_label", "parse_score"]
