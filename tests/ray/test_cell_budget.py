"""Failures inside Ray cells cost rollouts, never the run: a cell whose model never answers, a cell
whose agent drops the connection, and a cell frozen with SIGSTOP (what a partition looks like from
the driver) give their rollouts typed failures within their budget; the run completes and records
each (task, repeat) exactly once."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time

import pytest
from fastapi import FastAPI
from fastapi.responses import StreamingResponse

from gymlab import Lab
from gymlab.agents.base import BaseAgent
from gymlab.examples import example_rows, load_environment
from gymlab.testing.workers import wait_until

if os.environ.get("CI"):  # `make test` installs ray (the dev extra): under CI a missing ray is a failure
    import ray
else:
    ray = pytest.importorskip("ray")

counter = load_environment("counter")


def counter_rows(n: int) -> list[dict]:
    """``n`` counter rows, each one to three steps from its start to its target."""
    template = example_rows("counter")[0]
    rows = []
    for i in range(n):
        start, target = i, i + 1 + i % 3
        text = f"The counter starts at {start}. Use the increment tool, one step at a time, until it reads {target}."
        params = {**template["responses_create_params"], "input": [{"role": "user", "content": text}]}
        rows.append({"responses_create_params": params, "initial_count": start, "target": target})
    return rows


def keys(path) -> list[tuple[int, int]]:
    if not path.exists():
        return []
    return [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in map(json.loads, path.read_text().splitlines())]


def exactly_once(result, n: int, repeats: int = 1) -> None:
    """Each (task, repeat) of the run in exactly one of the two files, each line unique."""
    written = keys(result.output) + keys(result.paths["failures"])
    assert sorted(written) == [(t, k) for t in range(n) for k in range(repeats)]


async def stuck_policy(request):
    """A model that never answers (the cell's ``/run`` budget ends the wait)."""
    await asyncio.Event().wait()


@pytest.fixture(scope="module")
def lab(ray_cluster):
    with Lab() as lab:
        yield lab


def test_a_cell_whose_model_times_out_writes_failure_rows_and_the_run_completes(lab, tmp_path):
    """The cell's own typed timeout (raised inside the actor, a ServerError) crosses Ray whole."""
    from gymlab.collection.runner import collect

    pool = lab.serve_pool(counter.CounterServer, model=stuck_policy, replicas=2, cpus_per_replica=0.25)
    try:
        started = time.monotonic()
        result = collect(
            counter_rows(4),
            tmp_path / "run.jsonl",
            agent_url=pool.replicas(),
            agent="simple_agent",
            concurrency=4,
            max_retries=0,
            timeout_s=10,
            progress=False,
        )
        took = time.monotonic() - started
    finally:
        pool.close()
    assert result.rollouts == [] and len(result.failures) == 4
    exactly_once(result, 4)
    assert {f["failure_kind"] for f in result.failures} == {"transport_timeout"}
    # the cell's own answer (its agent named, within its 9 s) or, on a slow machine, the driver's (agent@cellN)
    assert {f["failure_server"] for f in result.failures} <= {pool.agent, f"{pool.agent}@cell0", f"{pool.agent}@cell1"}
    assert all(f["status"] == 0 and f["attempts"] == 1 for f in result.failures)
    assert took < 60, took


class DroppingAgent(BaseAgent):
    """An agent that starts its ``/run`` answer and breaks off: a dropped connection inside the cell."""

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()

        @app.post("/run")
        async def run() -> StreamingResponse:
            async def body():
                yield b'{"reward": '
                raise ConnectionResetError("the agent went away mid-answer")

            return StreamingResponse(body(), media_type="application/json")

        return app


def test_a_dropped_connection_inside_a_cell_writes_failure_rows_and_the_run_completes(lab, tmp_path):
    """The cell's post raises a typed ServerError in the actor; it reaches the driver whole."""
    from gymlab.collection.runner import collect

    pool = lab.serve_pool(counter.CounterServer, agent=DroppingAgent, model=counter.policy, cpus_per_replica=0.25)
    try:
        result = collect(
            counter_rows(4), tmp_path / "run.jsonl", agent_url=pool.replicas(), max_retries=1, backoff_s=0.01,
            retry_span_s=3.0, stop_after=None, progress=False,  # (the breaker would stop it: every try fails alike)
        )  # fmt: skip
    finally:
        pool.close()
    assert result.rollouts == [] and len(result.failures) == 4
    exactly_once(result, 4)
    assert {(f["failure_kind"], f["failure_server"], f["status"]) for f in result.failures} == {
        ("transport_peer_drop", pool.agent, 0)
    }
    assert all(f["attempts"] > 2 and "mid-answer" in f["failure_reason"] for f in result.failures)  # over 3 s


@pytest.fixture
def frozen(lab):
    """A pool of two counter cells with cell 1 stopped (SIGSTOP) and woken (SIGCONT) at the end."""
    pool = lab.serve_pool(
        counter.CounterServer,
        model=counter.policy,
        replicas=2,
        cpus_per_replica=0.25,
        agent_config={"timeouts": {"episode": 4, "cleanup": 1}},  # run_many's budget: 4 + 1 + 1 s
    )
    victim = pool.cells[1]
    pid = victim.info["pid"]
    os.kill(pid, signal.SIGSTOP)
    try:
        yield pool, victim
    finally:
        os.kill(pid, signal.SIGCONT)
        pool.close()


def test_a_frozen_cell_costs_its_rollouts_a_timeout_within_their_budget(lab, frozen, tmp_path):
    from gymlab.collection.runner import collect

    pool, victim = frozen
    out, n, budget = tmp_path / "run.jsonl", 10, 5.0
    started = time.monotonic()
    result = collect(
        counter_rows(n),
        out,
        agent_url=pool.replicas(),
        agent="simple_agent",
        concurrency=4,
        max_retries=0,
        timeout_s=budget,
        progress=False,
    )
    took = time.monotonic() - started
    graded = len(result.rollouts)  # read from the file now: the rerun below adds to it
    # every rollout the frozen cell took is a typed timeout the driver wrote; the others were graded
    assert result.failures and graded
    assert {f["failure_kind"] for f in result.failures} == {"transport_timeout"}
    assert {f["failure_server"] for f in result.failures} == {f"{pool.agent}@cell1"}
    assert all(r["reward"] == 1.0 for r in result.rollouts)
    exactly_once(result, n)
    # at most every rollout waits its whole budget one after another at the concurrency (here ~3 rounds)
    assert took < 3 * (n / 4 + 1) * budget, took  # far under the 120 s a cell-side budget took
    assert victim.alive  # a frozen cell is late, not gone: it is not taken out of rotation

    # run_many over the same pool: the agent's own episode bound plus its cleanup is the budget
    started = time.monotonic()
    records = lab.run_many(pool, counter_rows(6), concurrency=4, progress=False)
    took = time.monotonic() - started
    assert len(records) == 6 and [r.model_dump()["_ng_task_index"] for r in records] == list(range(6))
    failed = [r for r in records if r.mask_sample]
    assert failed and {r.failure_kind for r in failed} == {"transport_timeout"}
    assert all(r.reward == 1.0 for r in records if not r.mask_sample)
    assert took < 3 * (6 / 4 + 1) * pool.rollout_budget(), took

    # woken, the cell runs what it is given again; the cancelled calls it held write nothing
    os.kill(victim.info["pid"], signal.SIGCONT)
    wait_until(lambda: ray.get(victim.actor.info.remote(), timeout=30) is not None, 60, "the woken cell answers")
    before = set(out.read_text().splitlines())
    again = collect(
        counter_rows(n), out, agent_url=pool.replicas(), agent="simple_agent", progress=False, max_retries=0
    )
    assert again.n_skipped == graded  # the graded ones are done; the failed ones run again
    assert before <= set(out.read_text().splitlines())  # the first run's records kept as written
    assert sorted(keys(out)) == [(t, 0) for t in range(n)] and again.failures == []
