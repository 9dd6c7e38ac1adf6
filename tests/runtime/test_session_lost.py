"""A resources server answering 410 (its session's worker is gone) gives a masked rollout, not an error."""

import pytest
from fastapi import HTTPException

from gymlab import BaseVerifyRequest, GymnasiumServer


@pytest.fixture
def lab(lab_both):
    """Every test here runs with in-process dispatch and over loopback HTTP."""
    return lab_both


class GoneEnv(GymnasiumServer):
    async def step(self, action, metadata, session_id=None):
        raise HTTPException(410, "the worker that held this session is gone")


def test_gymnasium_agent_masks_a_lost_session(lab, rows):
    from gymlab.examples import load_environment

    env = lab.serve(GoneEnv)
    model = lab.serve_model(load_environment("blackjack").policy)
    agent = lab.serve_agent("gymnasium_agent", resources=env, model=model)
    rollout = agent.run(rows("blackjack")[0])
    assert rollout.mask_sample is True
    assert rollout.failure_kind == "session_lost"
    assert "410" in rollout.failure_reason and "gone" in rollout.failure_reason
    assert rollout.reward == 0.0
    assert env.server.session_state == {}


def test_simple_agent_masks_a_lost_session(lab, calculator, rows):
    class GoneCalculator(calculator.CalculatorServer):
        async def square(self, body: calculator.SquareRequest) -> calculator.SquareResponse:
            return calculator.SquareResponse(result=0)

        async def verify(self, body: BaseVerifyRequest):
            raise HTTPException(410, "the worker that held this session is gone")

    env = lab.serve(GoneCalculator)
    model = lab.serve_model(calculator.policy)
    agent = lab.serve_agent("simple_agent", resources=env, model=model)
    rollout = agent.run(rows("calculator")[0])
    assert (rollout.mask_sample, rollout.failure_kind) == (True, "session_lost")
