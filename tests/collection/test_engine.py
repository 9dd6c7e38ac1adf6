"""The one run engine: both sinks validate an agent's answer alike, and a failure is retried by its kind."""

from __future__ import annotations

import json

import pytest
from fastapi import FastAPI

from gymlab import BaseServer
from gymlab._http.retry import retried
from gymlab.collection import acollect
from gymlab.examples import example_rows
from gymlab.protocol.failure_kinds import FAILURE_KINDS


class NotARecordAgent(BaseServer):
    """An agent whose ``/run`` answers 200 with a JSON object that is not a rollout record."""

    calls: list = []

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()

        @app.post("/run")
        async def run(body: dict) -> dict:
            self.calls.append(body.get("_ng_task_index"))
            return {"reward": "high", "steps": "many"}

        return app


def test_only_transport_and_provider_kinds_are_retried():
    assert {k for k in FAILURE_KINDS if retried(k)} == {
        k for k in FAILURE_KINDS if k.startswith("transport_") or k.startswith("provider_")
    }
    assert not any(retried(k) for k in ("verifier_error", "judge_failed", "judge_unparseable", "agent_run_error"))
    assert not retried(None) and not retried("my_env:transport_like")


async def test_an_answer_that_is_not_a_record_fails_once_in_both_sinks(lab, tmp_path):
    agent = lab.serve_agent(NotARecordAgent, name="odd_agent")
    agent.server.calls.clear()
    rows = example_rows("calculator")[:2]

    result = await acollect(rows, tmp_path / "run.jsonl", agent_url=agent.url, max_retries=3, progress=False)
    assert result.n_rollouts == 0 and (tmp_path / "run.jsonl").read_text() == ""
    failures = [json.loads(line) for line in (tmp_path / "run_failures.jsonl").read_text().splitlines()]
    assert [(f["failure_kind"], f["attempts"]) for f in failures] == [("agent_run_error", 1)] * 2
    assert "not a rollout record" in failures[0]["failure_reason"]
    assert sorted(agent.server.calls) == [0, 1]  # one attempt each: the answer would be the same again

    agent.server.calls.clear()
    records = await lab.arun_many(agent, rows, check=False)
    assert [(r.mask_sample, r.failure_kind) for r in records] == [(True, "agent_run_error")] * 2
    assert "not a rollout record" in records[0].failure_reason
    assert sorted(agent.server.calls) == [0, 1]


def test_run_many_retries_a_provider_failure_when_asked(lab, calculator):
    """The memory sink's runs use the same rule: a model that fell over once is retried, not recorded."""
    calls = {"n": 0}

    def falls_over_once(request):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("the model fell over")
        return calculator.policy(request)

    env = lab.serve(calculator.CalculatorServer, name="calculator")
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(falls_over_once))
    row = example_rows("calculator")[:1]
    [first] = lab.run_many(agent, row)  # no retries by default: the failure is shown, masked
    assert (first.mask_sample, first.failure_kind) == (True, "provider_unavailable")
    calls["n"] = 0
    [again] = lab.run_many(agent, row, max_retries=1)
    assert (again.mask_sample, again.reward) == (False, 1.0) and calls["n"] == 3  # 1 failed, then 2 turns


async def test_collect_and_acollect_are_one_pair(tmp_path):
    """The same parameters; ``acollect`` serves a config's servers from a caller's own loop as ``collect``
    does from sync code."""
    import inspect

    import gymlab
    from gymlab.examples import environment_dir

    assert inspect.signature(gymlab.collect).parameters == inspect.signature(gymlab.acollect).parameters
    config = environment_dir("calculator") / "configs" / "calculator.yaml"
    result = await gymlab.acollect(config, tmp_path / "run.jsonl", limit=2, progress=False)
    assert (result.n_rollouts, result.n_failures, result.mean_reward) == (2, 0, 1.0)
    again = await gymlab.acollect(config, tmp_path / "run.jsonl", limit=2, progress=False)
    assert (again.n_new, again.n_skipped) == (0, 2)  # served again, on new ports, and resumed


@pytest.mark.parametrize("when", ["at the start", "midway"])
def test_a_short_resources_server_outage_is_ridden_out_by_the_retries(tmp_path, when):
    """The resources server goes away (its port closed) until some rollout has failed three tries (the
    old rule's whole budget: two retries over 1.5 s, which left 16 of 300 rows failed), then comes
    back on the same port: every row is collected, none failed, and the breaker does not stop the run
    (at the start, its first tries all fail alike, but for less than the retry span)."""
    import threading

    from gymlab import Lab
    from gymlab.collection import ReplicaPool, collect
    from gymlab.examples import load_environment
    from gymlab.testing.workers import wait_until

    counter = load_environment("counter")
    out = tmp_path / "run.jsonl"
    with Lab(wire=True) as lab:
        env = lab.serve(counter.CounterServer, name="counter")
        port = int(env.url.rsplit(":", 1)[1])
        agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(counter.policy))
        pool = ReplicaPool([agent.url], reprobe_s=None)
        rows = example_rows("counter")  # 5 rows x 60 repeats: 300 rollouts, 16 at a time
        if when == "at the start":
            env.stop()
        done: dict = {}
        run = threading.Thread(
            target=lambda: done.setdefault("result", collect(rows, out, agent_url=pool, repeats=60, progress=False))
        )
        run.start()
        try:
            if when == "midway":
                wait_until(lambda: out.exists() and out.read_text().count("\n") >= 40, 120, "40 rollouts written")
                env.stop()
            down = sum(pool.started().values())
            # 16 rows in flight: 49 tries since the outage began means one row has failed three times
            wait_until(lambda: sum(pool.started().values()) - down >= 49, 120, "a row failing its third try")
            lab.serve(counter.CounterServer, name="counter", port=port)
        finally:
            run.join(180)
        result = done["result"]
    assert not run.is_alive() and result.n_failures == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 300
    lost = [r for r in records if r.get("mask_sample")]  # episodes whose session the restart lost
    assert {r["failure_kind"] for r in lost} <= {"session_lost"} and len(lost) <= 16
    assert all(r["reward"] == 1.0 for r in records if not r.get("mask_sample"))
