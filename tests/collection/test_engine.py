"""The one run engine: both sinks validate an agent's answer alike, and a failure is retried by its kind."""

from __future__ import annotations

import json

from fastapi import FastAPI

from gymlab import BaseServer
from gymlab.collection import acollect
from gymlab.examples import example_rows
from gymlab.protocol.failure_kinds import FAILURE_KINDS
from gymlab.retry import retried


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
