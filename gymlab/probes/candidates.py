"""Answers a probe can write without solving the task: the row's field values, the prompt's tokens and
their edits, the numbers' neighbours and sums, a short token's permutations (bounded); and short guesses
(a constant, one number of the prompt, the other rows' most common answer) in the format the prompt asks for.
"""

from __future__ import annotations

import itertools
import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from gymlab.protocol import ResponseCreateParams
from gymlab.protocol.record import own_fields

#: Characters of candidates an answer-aware spray writes at most.
SPRAY_CHARS = 64_000
#: A token with at most this many letters has every permutation of them tried (7! = 5,040).
MAX_PERMUTED_LETTERS = 7
#: The decoys a spray starts and ends with, so a reward that reads only the first or last word or
#: number of an answer reads a decoy: only a reward that finds the answer anywhere pays a spray.
DECOYS = ("none", "-7777777")
#: A quoted substring of up to 40 characters (a prompt's or a tool's: "starts with 'apple'").
QUOTED = re.compile(r"""['"`]([^'"`\n]{1,40})['"`]""")
#: A number as a prompt writes it.
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_TOKEN = re.compile(r"[^\W_]+(?:['-][^\W_]+)*")


def row_prompt(row: dict[str, Any]) -> str:
    """A row's task as one message: its last user message (else its first message)."""
    try:
        items = ResponseCreateParams.model_validate(row.get("responses_create_params") or {}).input_items()
    except ValueError:
        return ""
    messages = [i for i in items if i.type == "message"]
    users = [m.text for m in messages if m.role == "user"]
    return (users[-1] if users else messages[0].text if messages else "") or ""


class RowIndex(dict):
    """Rows by their prompt (``row_prompt``): the rows a request may be of; ``cached``: what the probes
    compute once over all of them."""

    def __init__(self, rows: Iterable[dict[str, Any]] = ()):
        super().__init__()
        self.cached: dict[str, Any] = {}
        for row in rows:
            self.setdefault(row_prompt(row), []).append(row)


def rows_of(messages: Iterable[str], index: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The rows whose prompt is one of ``messages`` (a request's message texts)."""
    return [row for text in dict.fromkeys(messages) for row in index.get(text, ())]


def leaves(value: Any, depth: int = 3) -> Iterator[str]:
    """The strings and numbers in ``value`` (nested dicts and lists, ``depth`` levels down), stripped."""
    if isinstance(value, str):
        if value.strip():
            yield value.strip()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        yield json.dumps(value)
    elif isinstance(value, (dict, list, tuple)) and depth > 0:
        for v in value.values() if isinstance(value, dict) else value:
            yield from leaves(v, depth - 1)


def field_values(row: dict[str, Any], depth: int = 3) -> list[str]:
    """Every string and number in a row's own fields (``own_fields``), ``depth`` down."""
    return list(leaves(own_fields(row), depth))


def short_values(rows: Iterable[dict[str, Any]]) -> Iterator[str]:
    """The field values of at most three words (the ones that look like answers), in order, once each."""
    seen: set[str] = set()
    for row in rows:
        for value in field_values(row):
            if value not in seen and len(value.split()) <= 3:
                seen.add(value)
                yield value


def edits(token: str) -> Iterator[str]:
    """A token's case forms, its reversal, and (up to 12 letters) each one-letter drop and adjacent swap."""
    yield from (token, token.lower(), token.upper(), token.capitalize(), token[::-1])
    if len(token) <= 12:
        for i in range(len(token)):
            yield token[:i] + token[i + 1 :]
            if i + 1 < len(token):
                yield token[:i] + token[i + 1] + token[i] + token[i + 2 :]


def number_guesses(numbers: list[str]) -> Iterator[str]:
    """Each number and its neighbours, negation and square; sums, differences and products of the first six."""
    values = []
    for text in numbers:
        value = float(text)
        value = int(value) if value.is_integer() and abs(value) < 1e15 else value
        values.append(value)
        yield text
        yield from map(str, (value - 1, value + 1, -value, value * value))
    for a, b in itertools.permutations(values[:6], 2):
        yield from map(str, (a + b, a - b, a * b))


def permutations(tokens: Iterable[str]) -> Iterator[str]:
    """Every ordering of the letters of each token of 2 to ``MAX_PERMUTED_LETTERS`` letters."""
    for token in tokens:
        if 2 <= len(token) <= MAX_PERMUTED_LETTERS:
            yield from ("".join(p) for p in itertools.permutations(token))


def task_candidates(prompt: str, rows: list[dict[str, Any]], common: Iterable[str] = ()) -> Iterator[str]:
    """Candidate answers for a task: the rows' fields, the prompt's tokens, numbers, permutations, edits."""
    values = [v for row in rows for v in field_values(row)]
    yield from values
    quoted = QUOTED.findall(prompt)
    tokens = list(dict.fromkeys([*quoted, *(t for v in values for t in _TOKEN.findall(v)), *_TOKEN.findall(prompt)]))
    yield from tokens
    yield from number_guesses([n for text in [*values, prompt] for n in NUMBER.findall(text)])
    skip = {w.lower() for w in common}
    plain = [t for t in tokens if t not in quoted and t.lower() not in skip and t.isalpha()]
    yield from permutations([*quoted, *sorted(plain[::-1], key=len)])
    for token in tokens:
        yield from edits(token)


def spray(candidates: Iterable[str]) -> str:
    """Distinct candidates between the decoys, up to ``SPRAY_CHARS`` characters (one over an eighth left out)."""
    limit = SPRAY_CHARS
    kept: dict[str, None] = {}
    size = 0
    for candidate in candidates:
        candidate = " ".join(candidate[: limit // 8 + 1].split())
        if not candidate or len(candidate) > limit // 8 or candidate in kept or candidate in DECOYS:
            continue  # an overlong value is no guess at an answer
        size += len(candidate) + 1
        if size > limit:
            break
        kept[candidate] = None
    return " ".join([*DECOYS, *kept, *reversed(DECOYS)])


#: Row keys that hold a task's answer, first found first; a row with none offers its short top-level values.
ANSWER_KEYS = (
    "answer",
    "expected_answer",
    "expected",
    "ground_truth",
    "target",
    "label",
    "solution",
    "reference_answer",
    "reference",
    "gold",
)
#: Characters of an answer the most-common-answer probe gives at most (a longer one is no short answer).
MAX_ANSWER_CHARS = 1_000


def in_answer_format(prompt: str, text: str) -> str:
    """``text`` as the prompt asks answers to be written: in ``<answer>`` tags, in ``\\boxed{}``, else bare."""
    if "<answer>" in prompt.lower():
        return f"<answer>{text}</answer>"
    if "\\boxed" in prompt:
        return f"\\boxed{{{text}}}"
    return text


def spelled(word: str, prompt: str) -> str:
    """``word`` in the case the prompt writes it ("True" when the prompt says "True or False"); a single
    letter stays as given (the article "a" is no option "A")."""
    if len(word) < 2 or not word.isalpha():
        return word
    found = re.search(rf"\b{re.escape(word)}\b", prompt, re.IGNORECASE)
    return found.group(0) if found else word


def prompt_number(text: str, which: str) -> str:
    """The ``which``-th distinct number of ``text`` (1-based, or ``last``; the last when it has fewer), or ""."""
    numbers = list(dict.fromkeys(NUMBER.findall(text)))
    if not numbers:
        return ""
    return numbers[-1] if which == "last" else numbers[min(int(which), len(numbers)) - 1]


def answer_values(row: dict[str, Any]) -> list[str]:
    """A row's answers of up to ``MAX_ANSWER_CHARS``: its first ``ANSWER_KEYS`` field, else its short top-level values."""
    found = next((row[key] for key in ANSWER_KEYS if row.get(key) is not None), None)
    if found is not None:
        values = [found if isinstance(found, str) else json.dumps(found)]
    else:
        values = list(dict.fromkeys(v for v in field_values(row, depth=1) if len(v.split()) <= 3))
    return [v for v in values if len(v) <= MAX_ANSWER_CHARS]


def most_common_answer(rows: Iterable[dict[str, Any]]) -> str:
    """The answer most of ``rows`` share ("" without one; a tie: the first seen), up to ``MAX_ANSWER_CHARS``."""
    counts = Counter(v for row in rows for v in answer_values(row))
    return counts.most_common(1)[0][0] if counts else ""


class AnswerCounts:
    """How many rows hold each answer, in order of count then first place: built once over every row,
    so the most common answer of all rows but a task's own costs that task's rows, not every row."""

    def __init__(self, rows: Iterable[dict[str, Any]]):
        self.places: dict[str, list[int]] = {}  # answer -> the places of the rows that hold it
        self.rows_at: dict[int, list[int]] = {}  # id(row) -> its places (a row passed twice: both)
        self.values: list[list[str]] = []  # place -> the row's answers
        for place, row in enumerate(rows):
            self.rows_at.setdefault(id(row), []).append(place)
            self.values.append(answer_values(row))
            for value in self.values[-1]:
                self.places.setdefault(value, []).append(place)
        self.ranked = sorted(self.places, key=lambda v: (-len(self.places[v]), self.places[v][0]))

    def most_common_but(self, own_rows: Iterable[dict[str, Any]]) -> str:
        """``most_common_answer`` of every row but ``own_rows``, ties to the first seen among the others."""
        own = {place for row in own_rows for place in self.rows_at.get(id(row), ())}
        taken = Counter(v for place in own for v in self.values[place])
        best: tuple[int, int, str] | None = None  # (-count, first place, answer)
        for value in self.ranked:  # the most common answer no own row holds: its count and place stand
            if value not in taken:
                best = (-len(self.places[value]), self.places[value][0], value)
                break
        for value, n in taken.items():  # an answer own rows hold: fewer of it, first seen later
            left = len(self.places[value]) - n
            if left > 0:
                candidate = (-left, next(p for p in self.places[value] if p not in own), value)
                best = candidate if best is None else min(best, candidate)
        return best[2] if best else ""
