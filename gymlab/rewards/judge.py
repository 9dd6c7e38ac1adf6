"""Model judges: a rubric component that asks a model server for a verdict (docs/judges.md, docs/rewards.md)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import re
import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from gymlab._http.client import Client
from gymlab._http.retry import backoff_delay, retrying
from gymlab.errors import ServerError, TransportError
from gymlab.protocol.failure_kinds import Failure
from gymlab.rewards.rubric import ComponentFailed

_NUM = r"-?\d+(?:\.\d+)?"
_NUMBER = re.compile(_NUM)
#: "3/10", "3 out of 10": a numerator and the scale it is on.
_FRACTION = re.compile(rf"(?<![\d.])({_NUM})\s*(?:/|\bout\s+of\b)\s*(\d+(?:\.\d+)?)", re.I)
#: Mentions of a scale, not a grade: "0-10", "1 to 5", "scale of 10".
_SCALE_TALK = re.compile(
    r"(?<![\d.])\d+(?:\.\d+)?\s*(?:-|\u2013|\u2014|\bto\b)\s*\d+(?:\.\d+)?|\bscale\s+of\s+\d+", re.I
)
#: A grade that opens a marker line, as the fixed line writes it ("0.0", "7/10"), not a range ("1-10").
_OPENING = re.compile(
    rf"\s*(?>({_NUM}))(?:\s*(?:/|\bout\s+of\b)\s*(\d+(?:\.\d+)?))?(?!\s*(?:-|\u2013|\u2014|\bto\b)\s*\d)", re.I
)
#: The fixed final line ``verdict_format`` asks for: ``VERDICT: ...`` or ``SCORE: ...``.
_MARKER = re.compile(r"\b(?:VERDICT|SCORE)[\s*]*:", re.I)
_NEGATION = r"\bnot|\bnever|n't"
#: At most this many lines or sentences of the answer (and as many of the prompt) are looked for in a verdict.
_MAX_QUOTED = 1000
#: A line or sentence this long is set aside when copied even if it holds no verdict: it is not the judge's.
_LONG = 20


class Unparseable(ValueError):
    """Raised by a verdict parser for an answer that is not a grade."""


def default_fields(body: Any) -> dict[str, Any]:
    """Template fields of a verify body: its own fields, ``question`` (last user message), ``answer`` (final text)."""
    data = body.model_dump(mode="json") if hasattr(body, "model_dump") else dict(body)
    fields = {k: v for k, v in data.items() if k not in ("responses_create_params", "response")}
    params = getattr(body, "responses_create_params", None)
    users = [i for i in (params.input_items() if params is not None else []) if getattr(i, "role", None) == "user"]
    fields["question"] = users[-1].text if users else ""
    response = getattr(body, "response", None)
    fields["answer"] = response.output_text if response is not None else ""
    return fields


def _on_scale(value: float, scale: tuple[float, float], what: str) -> float:
    low, high = scale
    if not (math.isfinite(value) and low <= value <= high):
        raise Unparseable(f"{what} {value!r:.40} is outside the scale {low:g}..{high:g}")
    return (value - low) / (high - low)


def parse_score(text: str, scale: tuple[float, float] = (0.0, 1.0)) -> float:
    """The verdict's grade mapped from ``scale`` to 0..1, else ``Unparseable`` (rules: docs/judges.md)."""
    top, text = float(scale[1]), " ".join(text.split())  # one space a run: no regex backtracks through a long run
    numbers = [m[1] for m in _FRACTION.finditer(text) if float(m[2]) == top]
    numbers = numbers or _NUMBER.findall(_SCALE_TALK.sub(" ", _FRACTION.sub(" ", text)))
    if not numbers:
        raise Unparseable(f"no grade on the scale {scale[0]:g}..{top:g} in the verdict {text[:200]!r}")
    return _on_scale(float(numbers[-1]), scale, "score")


def _label_pattern(label: str) -> str:
    """``label`` as a whole word, a hyphen allowed inside it ("IN-CORRECT" is INCORRECT)."""
    body = "[-\u00ad]?".join(r"\s+" if ch.isspace() else re.escape(ch) for ch in label.strip())
    return rf"(?<![\w-]){body}(?![\w-])"


def parse_label(text: str, labels: Mapping[str, float]) -> float:
    """The value of the verdict's last decision among ``labels``, else ``Unparseable`` (rules: docs/judges.md)."""
    names, text = sorted(labels, key=len, reverse=True), " ".join(text.split())
    one = "|".join(f"({_label_pattern(n)})" for n in names)
    for flags in (0, re.I):
        kept = re.sub(rf"(?:{one})(?:\s*(?:,?\s*\bor\b|,|/|\|)\s*(?:{one}))+", " ", text, flags=flags)
        matches = list(re.finditer(rf"((?i:{_NEGATION})\s+)?(?:{one})", kept, flags))
        if not matches:
            continue
        last = matches[-1]
        name = names[next(i for i, g in enumerate(last.groups()[1:]) if g is not None)]
        if last[1] is None:
            return float(labels[name])
        if len(names) != 2:
            raise Unparseable(f"the verdict's last decision is a negated label ({last[0]!r}), not one of {names}")
        return float(labels[names[1 - names.index(name)]])
    raise Unparseable(f"expected one of {', '.join(labels)} in the verdict, found none: {text[:200]!r}")


def parse_json(text: str, key: str = "score", scale: tuple[float, float] = (0.0, 1.0)) -> float:
    """``key`` of the verdict's last JSON object that has it (a bool or a number on ``scale``), else ``Unparseable``."""
    found = _json_objects(text, key)
    if not found:
        raise Unparseable(f"expected a JSON object with {key!r} in the verdict, got {text[:200]!r}")
    value = found[-1][0][key]
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return _on_scale(float(value), scale, repr(key))
    raise Unparseable(f"{key!r} in the verdict is {value!r:.100}, not a number")


def opening_score(line: str, scale: tuple[float, float] = (0.0, 1.0)) -> float:
    """The grade a marker line opens with ("0.0 - wrong (see step 2)." is 0.0), else ``parse_score`` of the line."""
    opening = _OPENING.match(line)
    if opening and (opening[2] is None or float(opening[2]) == float(scale[1])):
        return _on_scale(float(opening[1]), scale, "score")
    return parse_score(line, scale)


def json_quotes(verdict: str, answer: str, key: str) -> list[str]:
    """The JSON objects with ``key`` in ``verdict`` that the answer holds too: quoted, not the judge's own."""
    if f'"{key}"' not in answer:
        return []
    held = [obj for obj, _ in _json_objects(answer, key)]
    return [span for obj, span in _json_objects(verdict, key) if obj in held]


def marker_quotes(verdict: str, answer: str) -> list[str]:
    """The last 16 ``VERDICT:``/``SCORE:`` markers of ``verdict`` the answer holds too: quoted, not the judge's."""
    held = " ".join(answer.split()).lower()
    found = list(re.finditer(r"\b(?:VERDICT|SCORE)[\s*]*:\s*(?:[\w/+-]|\.(?=\d))+", verdict, re.I))[-16:]
    return [m[0] for m in found if re.search(rf"\b{re.escape(' '.join(m[0].split()).lower())}(?!\S)", held)]


def _json_objects(text: str, key: str) -> list[tuple[dict, str]]:
    """The JSON objects with ``key`` at the first or last 64 ``{`` of ``text`` (bounded), with their text."""
    decoder, found, starts = json.JSONDecoder(), [], [m.start() for m in re.finditer(r"\{", text)]
    for start in dict.fromkeys([*starts[:1], *starts[-64:]]):
        try:
            obj, end = decoder.raw_decode(text, start)
        except (ValueError, RecursionError):
            continue
        if isinstance(obj, dict) and key in obj:
            found.append((obj, text[start:end]))
    return found


def verdict_lines(text: str, markers: str = "VERDICT") -> list[str]:
    """The text after each of the last 16 ``markers`` and a colon, last first: the rest of its line, or the next."""
    found = list(re.finditer(rf"\b(?:{markers})[\s*]*:", text, re.I))[-16:]
    return [text[m.end() :].strip(" \t\r\n*_`").split("\n", 1)[0].strip(" \t\r*_`") for m in reversed(found)]


def _segments(text: str) -> Iterable[str]:
    """Each line of ``text`` and, in a line of several, each sentence; whitespace collapsed."""
    for line in text.split("\n"):
        parts = re.split(r"(?<=[.!?])\s+", line)
        for part in [line, *parts] if len(parts) > 1 else parts:
            part = " ".join(part.split())
            if part:
                yield part


def set_aside(verdict: str, quoted: Iterable[str]) -> str:
    """``verdict`` without the verbatim copies (whole words; runs of spaces as one) of the ``quoted`` texts."""
    verdict = re.sub(r"[^\S\n]+", " ", verdict)
    for text in sorted({" ".join(q.split()) for q in quoted} - {""}, key=len, reverse=True):
        pieces, start, at = [], 0, 0
        while (i := verdict.find(text, at)) >= 0:
            at, j = i + 1, i + len(text)
            if not (_joins(verdict, i - 1, text[0]) or _joins(verdict, j, text[-1])):
                pieces.append(verdict[start:i])
                start = at = j
        verdict = " ".join([*pieces, verdict[start:]])
    return verdict


def _joins(text: str, k: int, edge: str) -> bool:
    """Whether ``text[k]`` continues a word that ends in ``edge`` (so a match there is part of a longer word)."""
    word = edge.isalnum() or edge in "_-"
    return word and 0 <= k < len(text) and (text[k].isalnum() or text[k] in "_-")


@dataclass(frozen=True, eq=False)
class Judge:
    """A rubric component graded by a model server: ``template`` is its prompt, ``parse`` reads its verdict."""

    name: str
    model: Any
    template: str = "{question}\n\n{answer}\n\n{verdict_format}"
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
    #: The client asking the judge's model: given, else its handle's server's (a Lab's), else one per call.
    client: Client | None = field(default=None, repr=False, compare=False)
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
        if any(not (isinstance(k, str) and k.strip()) or not math.isfinite(v) for k, v in (self.labels or {}).items()):
            raise ValueError(f"judge {self.name!r}: labels must be non-empty words with finite values")
        low, high = self.scale
        if not (math.isfinite(low) and math.isfinite(high) and low < high):
            raise ValueError(f"judge {self.name!r}: scale must be two finite numbers (low, high), low < high")

    @property
    def url(self) -> str:
        return self.model if isinstance(self.model, str) else self.model.url

    def limit(self) -> asyncio.Semaphore:
        """This worker's bound on the judge's requests in flight (one per event loop)."""
        loop = asyncio.get_running_loop()
        return self._limits.get(loop) or self._limits.setdefault(loop, asyncio.Semaphore(self.max_concurrency))

    def verdict_format(self) -> str:
        """The instruction for the fixed final line this judge reads first (``{verdict_format}``)."""
        low, high = (f"{v:g}" for v in self.scale)
        number = f"n is a number from {low} to {high}"
        line, what = {
            "label": ("VERDICT: X", f"X is exactly one of {', '.join(self.labels or {})}"),
            "json": (f'VERDICT: {{"{self.json_key}": n}}', number),
            "score": (f"SCORE: n/{high}", number),
        }.get(self.parse if isinstance(self.parse, str) else "", ("VERDICT: X", "X is your grade"))
        return f'End your reply with one final line "{line}", where {what}, and nothing after it.'

    def _request(self, fields: dict[str, Any]) -> dict[str, Any]:
        try:
            prompt = self.template.format(**{"verdict_format": self.verdict_format(), **fields})
        except KeyError as exc:
            raise KeyError(
                f"judge {self.name!r}: the template names {exc}, which the verify body does not carry; "
                "declare that row field on the environment's verify request model"
            ) from None
        system = [{"role": "system", "content": self.system}] if self.system else []
        request: dict[str, Any] = {"input": [*system, {"role": "user", "content": prompt}]}
        if self.model_name:
            request["model"] = self.model_name
        return request

    def verdict_like(self, text: str) -> bool:
        """Whether ``text`` could be read as a verdict: a marker, a label, its JSON key, a score on its scale."""
        if _MARKER.search(text) or ("{" in text and f'"{self.json_key}"' in text):
            return True
        if self.labels and re.search("|".join(map(_label_pattern, self.labels)), text, re.I):
            return True
        return self.parse == "score" and any(float(m[2]) == self.scale[1] for m in _FRACTION.finditer(text))

    def quotable(self, answer: str, request: dict[str, Any]) -> tuple[list[str], list[str], bool]:
        """What a verdict must not be read from if copied: (blame, other text, too many) (docs/judges.md)."""
        parts = set(_segments(answer))
        blame = sorted((s for s in parts if self.verdict_like(s)), key=len, reverse=True)
        prompt = {s for m in request["input"] for s in _segments(m["content"])} - parts
        other = [s for s in prompt if (len(s) >= _LONG or self.verdict_like(s)) and not self._reads(s)]
        other += [s for s in parts.difference(blame) if len(s) >= _LONG]
        return blame[:_MAX_QUOTED], sorted(other, key=len, reverse=True)[:_MAX_QUOTED], len(blame) > _MAX_QUOTED

    def _reads(self, text: str) -> bool:
        """Whether ``text`` alone is a grade (for a function ``parse``: it returns one without raising)."""
        try:
            self.read(text)
        except Exception:
            return False
        return True

    def read(self, text: str, quoted: Iterable[str] = ()) -> float:
        """The verdict ``text`` as a finite value, ``quoted`` texts set aside (``Unparseable`` when no grade)."""
        text = set_aside(text, quoted)
        if callable(self.parse):
            value = float(self.parse(text))
        else:
            lines = verdict_lines(text, "SCORE|VERDICT" if self.parse == "score" else "VERDICT")
            value = self._parse_lines(lines) if lines else self._parse_text(text)
        if not math.isfinite(value):
            raise Unparseable(f"the verdict reads as {value}, not a finite number")
        return value

    def _parse_lines(self, lines: list[str]) -> float:
        """The last marker line that is a grade (the first error when none is)."""
        errors = []
        for line in lines:
            try:
                return opening_score(line, self.scale) if self.parse == "score" else self._parse_text(line)
            except Unparseable as exc:
                errors.append(exc)
        raise errors[0]

    def _parse_text(self, text: str) -> float:
        if self.parse == "label":
            return parse_label(text, self.labels or {})
        if self.parse == "json":
            return parse_json(text, self.json_key, self.scale)
        return parse_score(text, self.scale)

    async def evaluate(self, body: Any) -> tuple[float, dict[str, Any]]:
        fields = self.fields(body)
        request = self._request(fields)
        judgement: dict[str, Any] = {"component": self.name, "model": self.url, "request": request}

        async def ask() -> Any:
            judgement["attempts"] = judgement.get("attempts", 0) + 1
            server = f"judge {self.name!r}"
            given = self.client or getattr(getattr(self.model, "server", None), "client", None)
            async with contextlib.nullcontext(given) if given else Client() as client:  # none kept between calls
                return await client.ask_model(self.url, request, server=server, timeout=self.timeout_s)

        def again(exc: Exception, n: int) -> float | None:
            # a transport failure, a 5xx, a 429 or a 200 non-answer is worth another try; a 4xx is not
            if n >= self.attempts or not isinstance(exc, ServerError):
                return None
            worth = isinstance(exc, TransportError) or exc.status >= 500 or exc.status in (200, 408, 429)
            return backoff_delay(self.backoff_s, n) if worth else None

        async with self.limit():
            try:
                response = await retrying(ask, again)
            except ServerError as exc:
                raise self._failed("judge_failed", judgement, f"the judge model failed: {exc}") from exc
        text = judgement["verdict"] = response.output_text
        answer = str(fields.get("answer") or "")
        blame, other, flooded = self.quotable(answer, request)
        blame += marker_quotes(text, answer)  # a marker line the answer holds is a quote, wherever the judge put it
        if self.parse == "json":  # a verdict object the answer holds is a quote, however the judge framed it
            blame += json_quotes(text, answer, self.json_key)
        copied = set_aside(text, blame) != set_aside(text, ())
        try:
            if flooded and copied:
                raise Unparseable(f"the judge copied an answer of over {_MAX_QUOTED} verdict-like lines")
            value = self.read(text, [*blame, *other])
        except (Unparseable, ValueError, TypeError) as exc:
            if not copied:
                raise self._failed(
                    "judge_unparseable", judgement, f"the judge's answer is not a grade: {exc}"
                ) from None
            value = min(self.labels.values()) if self.parse == "label" and self.labels else 0.0
            judgement["note"] = (
                f"the policy's own verdict-like text, copied by the judge, left no verdict ({exc}): graded lowest"
            )
        judgement["value"] = value
        return value, judgement

    def _failed(self, kind: str, judgement: dict[str, Any], cause: str) -> ComponentFailed:
        message = f"judge {self.name!r} ({self.url}): {cause}"
        judgement["failure_kind"], judgement["error"] = kind, message
        return ComponentFailed(
            Failure(kind=kind, stage="verification", server=f"judge {self.name}", message=message), judgement
        )
