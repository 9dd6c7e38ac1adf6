"""The same failure has the same kind everywhere: the record, the frames, the live panel, the files.

Each kind comes from data (the agent's typed error body, or the masked record), never from text.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from fastapi import HTTPException, Request

from gymlab import collect
from gymlab.examples import example_rows, load_environment
from gymlab.lab.widgets import LivePanel


@pytest.fixture
def lab(lab_both):
    """Every test here runs with in-process dispatch and over loopback HTTP."""
    return lab_both


counter = load_environment("counter")


class JudgeDown(counter.CounterServer):
    async def verify(self, request: Request, body: counter.CounterVerifyRequest):
        raise RuntimeError("the grader crashed")


class Forgetful(counter.CounterServer):
    """Loses the session's state on the first tool call (as a dead worker's 410 does)."""

    async def increment(self, request: Request, body: counter.IncrementRequest) -> dict:
        self.session_state.pop(request.session["session_id"], None)
        raise HTTPException(410, "this session's worker is gone")


def model_500(request):
    raise RuntimeError("model is down")


async def silent(request):
    await asyncio.Event().wait()


# scenario -> (resources server, policy, agent config, expected kind, expected stage)
SCENARIOS = {
    "model 500": (counter.CounterServer, model_500, {}, "provider_unavailable", "agent"),
    "verify raising": (JudgeDown, counter.policy, {}, "verifier_error", "verification"),
    "session lost": (Forgetful, counter.policy, {}, "session_lost", "agent"),
    "timeout": (counter.CounterServer, silent, {"timeouts": {"model": 0.3}}, "transport_timeout", "agent"),
}


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_one_failure_has_one_kind_in_record_frames_panel_and_files(lab, tmp_path, scenario):
    server, policy, config, kind, stage = SCENARIOS[scenario]
    env = lab.serve(server)
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(policy), **config)
    rows = example_rows("counter")[:2]

    rollouts = lab.run_many(agent, rows)
    assert [(r.mask_sample, r.failure_kind, r.failure_stage) for r in rollouts] == [(True, kind, stage)] * 2
    assert rollouts.episodes["failure_kind"].tolist() == [kind] * 2
    assert rollouts.failures == {kind: 2}
    assert f"2 masked ({kind} 2)" in repr(rollouts)

    panel = LivePanel()
    panel.run(agent, rows)
    assert dict(panel.failed) == {kind: 2} and panel.kept == 0

    result = collect(rows, tmp_path / "run.jsonl", agent_url=agent.url, max_retries=0, progress=False)
    written = [
        json.loads(line)
        for line in (tmp_path / ("run.jsonl" if kind == "session_lost" else "run_failures.jsonl"))
        .read_text()
        .splitlines()
    ]
    assert [(w["failure_kind"], w["failure_stage"]) for w in written] == [(kind, stage)] * 2
    assert result.mean_reward != result.mean_reward  # nan: no unmasked rollout enters the mean
    assert env.server.session_state == {}
