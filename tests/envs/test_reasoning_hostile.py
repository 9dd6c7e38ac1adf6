"""ReasoningGymServer under hostile specs and answers: a malformed spec is a 422 naming its field, a spec
past its bounds is never built, grading runs in worker processes within budgets, an answer that breaks
grading is its own 0, and a worker keeps its built datasets within max_cache_bytes."""

from __future__ import annotations

import asyncio
import concurrent.futures
import random
import time

import httpx
import pytest

pytest.importorskip("reasoning_gym")

from reasoning_gym.utils import extract_answer  # noqa: E402

from gymlab import Lab, envs  # noqa: E402
from gymlab.envs.reasoning import cache_report, final_answer  # noqa: E402

CHAIN = {"dataset": "chain_sum", "config": {"size": 2, "seed": 1}, "index": 0}
COMPOSITE = {"size": 2, "seed": 1, "datasets": [{"name": "chain_sum", "weight": 1, "config": {}}]}

#: (what is wrong, the spec, the field the answer must name)
MALFORMED = [
    ("size as a string", {**CHAIN, "config": {"size": "8"}}, "config.size"),
    ("size negative", {**CHAIN, "config": {"size": -1}}, "config.size"),
    ("size null", {**CHAIN, "config": {"size": None}}, "config.size"),
    ("size zero", {**CHAIN, "config": {"size": 0}}, "config.size"),
    ("size huge", {**CHAIN, "config": {"size": 10**9}}, "config.size"),
    ("size a float", {**CHAIN, "config": {"size": 1.5}}, "config.size"),
    ("size a boolean", {**CHAIN, "config": {"size": True}}, "config.size"),
    ("seed as a list", {**CHAIN, "config": {"size": 2, "seed": [1]}}, "config.seed"),
    ("seed as a string", {**CHAIN, "config": {"size": 2, "seed": "x"}}, "config.seed"),
    ("seed past 2**63", {**CHAIN, "config": {"size": 2, "seed": 10**30}}, "config.seed"),
    ("seed a float", {**CHAIN, "config": {"size": 2, "seed": 1.5}}, "config.seed"),
    ("an unknown field", {**CHAIN, "config": {"colour": 1}}, "config.colour"),
    ("a field of the wrong type", {**CHAIN, "config": {"min_terms": "two"}}, "config.min_terms"),
    ("a whole-number field as a float", {**CHAIN, "config": {"min_terms": 2.5}}, "config.min_terms"),
    ("a boolean field as a number", {**CHAIN, "config": {"allow_negation": 1}}, "config.allow_negation"),
    ("a numeric field past its bound", {**CHAIN, "dataset": "count_primes", "config": {"max_n": 50_000_000}}, "max_n"),
    ("a field the build refuses", {**CHAIN, "config": {"min_terms": -3}}, "min_terms"),
    ("an unknown dataset", {**CHAIN, "dataset": "nope"}, "dataset"),
    ("index past the size", {**CHAIN, "index": 5}, "index"),
    ("a composite's datasets as a string", {**CHAIN, "dataset": "composite", "config": {"datasets": "x"}}, "datasets"),
    (
        "a composite's dataset as a number",
        {**CHAIN, "dataset": "composite", "config": {"datasets": [5]}},
        "datasets[0]",
    ),
    (
        "a composite's unknown dataset",
        {**CHAIN, "dataset": "composite", "config": {"datasets": [{"name": "nope", "weight": 1, "config": {}}]}},
        "datasets[0].dataset",
    ),
    (
        "a composite's weight as a string",
        {**CHAIN, "dataset": "composite", "config": {"datasets": [{"name": "chain_sum", "weight": "x"}]}},
        "datasets[0].weight",
    ),
    (
        "a composite's weight past any float",
        {**CHAIN, "dataset": "composite", "config": {"datasets": [{"name": "chain_sum", "weight": 10**400}]}},
        "datasets[0].weight",
    ),
    (
        "a composite's inner field of the wrong type",
        {
            **CHAIN,
            "dataset": "composite",
            "config": {"datasets": [{"name": "chain_sum", "weight": 1, "config": {"max_terms": [1]}}]},
        },
        "datasets[0].config.max_terms",
    ),
    (
        "a composite's inner field past its bound",
        {
            **CHAIN,
            "dataset": "composite",
            "config": {"datasets": [{"name": "count_primes", "weight": 1, "config": {"max_n": 10**12}}]},
        },
        "datasets[0].config.max_n",
    ),
]


@pytest.fixture(scope="module")
def served():
    with Lab() as lab:
        server, rows = envs.reasoning_gym("chain_sum", size=2, seed=1)
        server.work_processes = 1  # one worker imports reasoning-gym for the whole module
        yield server, rows, lab.serve(server).url, lab


def said(text: str) -> dict:
    return {"output": [{"type": "message", "role": "assistant", "content": text}]}


def verify(url: str, row: dict, **changes) -> httpx.Response:
    return httpx.post(f"{url}/verify", json={**row, "response": said("<answer>1</answer>"), **changes}, timeout=60)


@pytest.mark.parametrize("what,spec,field", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_spec_is_a_422_naming_its_field(served, what, spec, field):
    server, rows, url, _ = served
    answer = verify(url, {k: v for k, v in rows[0].items() if k != "answer"}, reasoning_gym=spec)
    assert answer.status_code == 422, (what, answer.status_code, answer.text[:300])
    assert field in answer.text and server.name in answer.text, answer.text[:300]


def test_a_spec_past_its_bounds_is_refused_before_anything_is_built(served):
    server, rows, url, _ = served
    t0 = time.perf_counter()
    spec = {"dataset": "count_primes", "config": {"size": 1, "min_n": 10**9, "max_n": 2 * 10**9}, "index": 0}
    answer = verify(url, rows[0], reasoning_gym=spec, answer=None)
    assert answer.status_code == 422 and "max_config_scale" in answer.text
    assert time.perf_counter() - t0 < 5  # refused, not built (that build ran 73 s)


def test_repeated_answer_tags_are_graded_at_once_and_health_answers_meanwhile(served):
    """96 KB of unclosed ``<answer>`` tags: reasoning-gym's regex takes seconds, the one pass does not."""
    server, rows, url, _ = served
    text = "<answer>" * 12_000 + "<answer>3</answer>"
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        graded = [pool.submit(verify, url, rows[0], response=said(text)) for _ in range(4)]
        waits = []
        for _ in range(5):
            t0 = time.perf_counter()
            assert httpx.get(f"{url}/health", timeout=30).status_code == 200
            waits.append(time.perf_counter() - t0)
        answers = [g.result() for g in graded]
    assert max(waits) < 3.0, waits  # reasoning-gym's own extract_answer held the loop 12 s on each
    for answer in answers:
        body = answer.json()
        assert answer.status_code == 200 and not body["mask_sample"] and body["reward"] == 0.0, body.get(
            "failure_reason"
        )


def test_final_answer_is_extract_answer_in_one_pass():
    pieces = ["<answer>", "</answer>", " ", "\n", "1", "ab", "<answer", "answer>", "</", "\t"]
    rng = random.Random(5)
    for _ in range(3000):
        text = "".join(rng.choice(pieces) for _ in range(rng.randrange(12)))
        assert final_answer(text) == extract_answer(text), text


def test_an_answer_over_max_answer_chars_is_a_zero(served):
    server, rows, url, _ = served
    body = verify(url, rows[0], response=said("<answer>" + "7" * 20_000 + "</answer>")).json()
    assert body["reward"] == 0.0 and not body["mask_sample"] and "max_answer_chars" in body["response_too_large"]


def test_score_answer_raising_on_the_answer_is_its_zero_not_masked(served):
    url = served[2]
    _, rows = envs.reasoning_gym("prime_factorization", size=1, seed=0)  # graded by the module's server
    body = verify(url, rows[0], response=said("<answer>1/0</answer>")).json()
    assert body["reward"] == 0.0 and body["mask_sample"] is False and body["failure_kind"] is None
    assert "score_answer raised ValueError" in body["answer_error"]
    right = verify(url, rows[0], response=said(f"<answer>{rows[0]['answer']}</answer>")).json()
    assert right["reward"] == 1.0 and "answer_error" not in right


def test_a_build_past_its_budget_is_the_servers_failure_masked(served):
    """A dataset that does not build in time fails on any answer: infrastructure, never the answer's 0."""
    server, rows, url, _ = served
    config = {"size": 1, "seed": 0, "max_n": 3_000_000}
    server.issue("count_primes", config)
    server.build_budget_seconds = 0.05
    try:
        spec = {"dataset": "count_primes", "config": config, "index": 0}
        masked = verify(url, rows[0], reasoning_gym=spec, answer=None).json()
    finally:
        server.build_budget_seconds = 60.0
    assert masked.get("mask_sample") is True and masked["failure_kind"] == "verifier_error", str(masked)[:600]
    assert "_dataset ran past its budget of 0.05 s" in masked["failure_reason"], masked["failure_reason"]
    assert verify(url, rows[0]).json()["mask_sample"] is False  # the next call has a fresh worker


def test_a_worker_keeps_its_datasets_within_max_cache_bytes(served):
    """count_primes keeps a sieve of max_n entries: four such specs, each past a third of the cap."""
    server, rows, url, _ = served
    server.max_cache_bytes = 40 * 1024 * 1024
    try:
        for seed in range(4):
            config = {"size": 1, "seed": seed, "max_n": 2_000_000}
            server.issue("count_primes", config)
            spec = {"dataset": "count_primes", "config": config, "index": 0}
            answer = verify(url, rows[0], reasoning_gym=spec, answer=None)
            assert answer.status_code == 200 and not answer.json()["mask_sample"], answer.text[:300]
        report = asyncio.run(server.offload(cache_report))
    finally:
        server.max_cache_bytes = 256 * 1024 * 1024
    assert 1 <= report["datasets"] < 4 and report["bytes"] <= 40 * 1024 * 1024, report
