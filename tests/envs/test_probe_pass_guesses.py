"""``gymlab envs reasoning_gym --probe`` at its default settings flags every dataset that pays a bare
short guess more than 0.05, as reasoning-gym itself scores it, and no clean arithmetic dataset.

The truth is computed here from reasoning-gym alone: each dataset's ``score_answer`` on every digit,
yes/no and true/false in both cases, option letters A-E, each number of the question alone (its 1st
to 5th distinct number and its last) and the other entries' most common answer. A guess pays a
dataset when it earns more than 0.05 on average and on more than one entry: one entry alone is that
entry's own answer (chain_sum pays "6" on the one entry that sums to 6).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("reasoning_gym")

from gymlab.envs import reasoning_gym  # noqa: E402
from gymlab.envs.reasoning import build  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
#: Clean arithmetic (a guess pays one entry at most), a constant yes, a skewed digit, the question's number.
DATASETS = ("chain_sum", "products", "syllogism", "letter_counting", "prime_factorization")
CLEAN_ARITHMETIC = ("chain_sum", "products")
SIZE = 8  # the command's default
PAYS = 0.05
GUESS_RUNS = ("short_constant:", "prompt_number:", "majority_answer")

WORDS = ("yes", "no", "true", "false")
CONSTANTS = (*"0123456789", *WORDS, *(w.capitalize() for w in WORDS), *"ABCDE")
NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _score(dataset, answer: str, entry) -> float:
    try:
        return float(dataset.score_answer(answer, entry))
    except Exception:  # a score_answer that raises on a guess pays it nothing
        return 0.0


def _pays(scores: list[float]) -> bool:
    return sum(scores) / len(scores) > PAYS and sum(s > PAYS for s in scores) > 1


def guesses_that_pay(name: str) -> list[str]:
    """The guesses that pay ``name`` at the command's default settings, scored by reasoning-gym alone."""
    rows = reasoning_gym(name, size=SIZE, seed=0)[1]
    dataset = build(name, rows[0]["reasoning_gym"]["config"])
    entries = [dataset[i] for i in range(len(rows))]
    paid = [c for c in CONSTANTS if _pays([_score(dataset, c, e) for e in entries])]
    for position in (1, 2, 3, 4, 5, "last"):
        answers = []
        for row in rows:
            numbers = list(dict.fromkeys(NUMBER.findall(row["question"])))
            at = -1 if position == "last" else min(position, len(numbers)) - 1
            answers.append(numbers[at] if numbers else "")
        if _pays([_score(dataset, a, e) for a, e in zip(answers, entries)]):
            paid.append(f"number {position}")
    answers = [a if isinstance(a := row["answer"], str) else json.dumps(a) for row in rows]
    others = [Counter(answers[:i] + answers[i + 1 :]).most_common(1)[0][0] for i in range(len(rows))]
    if _pays([_score(dataset, a, e) for a, e in zip(others, entries)]):
        paid.append("most common")
    return paid


def test_the_probe_pass_flags_every_dataset_a_guess_pays_and_no_clean_arithmetic():
    truth = {name: guesses_that_pay(name) for name in DATASETS}
    assert all(truth[name] == [] for name in CLEAN_ARITHMETIC), truth  # the sample still holds clean ones
    assert sum(bool(paid) for paid in truth.values()) >= 3, truth  # and ones a guess pays
    done = subprocess.run(
        [sys.executable, "-m", "gymlab.cli", "envs", "reasoning_gym", ",".join(DATASETS), "--probe", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr
    table = json.loads(done.stdout)
    assert table["size"] == SIZE and table["threshold"] == PAYS
    for name in DATASETS:
        found = table["datasets"][name]
        paid = [run for run in found["flagged"] if run.startswith(GUESS_RUNS) and found["paid"].get(run, 0) > PAYS]
        assert bool(paid) == bool(truth[name]), (name, truth[name], found)
        assert found["oracle"] == 1.0, (name, found)  # (prime_factorization's grader raises on some guesses)
    for name in CLEAN_ARITHMETIC:
        assert table["datasets"][name]["flagged"] == [], table["datasets"][name]
    # the guesses are written as the prompt asks: in answer tags, "Yes" as syllogism's question spells it
    assert table["datasets"]["syllogism"]["paid"]["short_constant:yes"] > 0.5
    assert "prompt_number:1" in table["datasets"]["prime_factorization"]["flagged"]
