"""Short answers a probe can give without the task: a digit, yes or no, true or false, an option letter,
one number of the prompt, the other rows' most common answer; each in the format the prompt asks for.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

from gymlab.probes.candidates import NUMBER, field_values

#: The constants the short-constant probe answers, one run each: digits, yes/no, true/false, option letters.
SHORT_CONSTANTS = (*"0123456789", "yes", "no", "true", "false", *"ABCDE")
#: Which number of the prompt the prompt-number probe answers, one run each (the 1st to 5th distinct, the last).
PROMPT_NUMBERS = ("1", "2", "3", "4", "5", "last")
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
    """``text`` as the prompt asks answers to be written: inside ``<answer>`` tags when it names them,
    in ``\\boxed{}`` when it names that, else bare."""
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
    """The ``which``-th distinct number of ``text`` (1-based, or ``last``); the last one when it has fewer;
    "" when it has none."""
    numbers = list(dict.fromkeys(NUMBER.findall(text)))
    if not numbers:
        return ""
    return numbers[-1] if which == "last" else numbers[min(int(which), len(numbers)) - 1]


def answer_values(row: dict[str, Any]) -> list[str]:
    """A row's answers of up to ``MAX_ANSWER_CHARS``: its first ``ANSWER_KEYS`` field with a value (a
    non-string as JSON), else its short top-level values (strings of at most three words, numbers); each once."""
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
