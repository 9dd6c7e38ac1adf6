"""Interactive episodes over real loopback HTTP: by hand and by model, fork, verify, release."""

import gc
import json
import uuid

import pytest

from gymlab import GymnasiumServer, ServerError, SimpleResourcesServer
from gymlab.errors import EpisodeError, ForkDivergedError
from gymlab.lab.gymnasium_episode import GymnasiumEpisode, Step
from gymlab.lab.runs import Rollouts
from gymlab.lab.seed_verify import SeedVerifyEpisode
from gymlab.protocol import BaseVerifyRequest, BaseVerifyResponse


@pytest.fixture
def lab(lab_both):
    """Every test here runs with in-process dispatch and over loopback HTTP."""
    return lab_both


@pytest.fixture
def blackjack():
    from gymlab.examples import load_environment

    return load_environment("blackjack")


def _counter(lab, counter):
    return lab.serve(counter.CounterServer), lab.serve_model(counter.policy, name="counter_policy")


def test_calculator_by_hand_then_verify(lab, calculator, rows):
    env = lab.serve(calculator.CalculatorServer)
    with lab.episode(env, rows("calculator")[0]) as ep:
        assert isinstance(ep, SeedVerifyEpisode)
        ep.seed()
        assert ep.call("square", value=4) == {"result": 16}
        ep.say("The answer is 16.")
        rollout = ep.verify()
    assert rollout.reward == 1.0
    assert [s.reward for s in rollout.steps] == [0.0, 1.0]
    assert rollout.steps[-1].terminated
    assert [i.type for i in ep.history][-3:] == ["function_call", "function_call_output", "message"]
    assert rollout.env_name == env.name
    # the frame of the episode so far: one row per step, rewards summing to the verify's reward
    frame = ep.frame
    assert list(frame["action_type"]) == ["function_call", "message"]
    assert frame["reward"].sum() == rollout.reward


def test_calculator_model_turn_uses_the_loop(lab, calculator, rows):
    env = lab.serve(calculator.CalculatorServer)
    model = lab.serve_model(calculator.policy)
    ep = lab.episode(env, rows("calculator")[1], model=model)
    ep.seed()
    step = ep.model_turn()
    assert json.loads(step.tool_outputs[0].output) == {"result": 49}
    ep.model_turn()
    assert ep.state.stop_reason == "final_message"
    assert ep.verify().reward == 1.0
    assert "The answer is 49." in ep._repr_html_()


def test_calculator_bad_call_is_an_error_and_not_recorded(lab, calculator, rows):
    env = lab.serve(calculator.CalculatorServer)
    with lab.episode(env, rows("calculator")[0]) as ep:
        ep.seed()
        with pytest.raises(ServerError, match=r"POST /sqaure failed with HTTP 404.*not recorded"):
            ep.call("sqaure", value=3)
        assert ep.steps == []


def test_counter_by_model_fork_and_verify_leave_no_session(lab, counter, rows):
    env, model = _counter(lab, counter)
    row = rows("counter")[0]  # 0 -> 3
    ep = lab.episode(env, row, model=model)
    ep.seed()
    ep.model_turn()
    branch = ep.fork()
    assert len(env.server.session_state) == 2
    assert branch.history[-1].output == ep.history[-1].output == '{"count":1}'
    # the branches continue independently
    ep.run()
    assert branch.call("increment", by=5) == {"count": 6}
    assert ep.verify().reward == 1.0
    assert branch.verify().reward == 0.0
    assert branch.result["final_count"] == 6
    assert env.server.session_state == {}


def test_counter_through_an_agent_handle(lab, counter, rows):
    env, model = _counter(lab, counter)
    agent = lab.serve_agent("simple_agent", resources=env, model=model)
    ep = lab.episode(agent, rows("counter")[1])
    ep.seed()
    ep.run()
    rollout = ep.verify()
    assert rollout.reward == 1.0
    assert rollout.agent == agent.name and rollout.env == env.name
    assert [c.type for c in rollout.steps[0].action] == ["function_call"]
    assert env.server.session_state == {}


def test_closed_and_dropped_episodes_release_their_session(lab, counter, rows):
    env, _ = _counter(lab, counter)
    ep = lab.episode(env, rows("counter")[0])
    ep.seed()
    ep.call("increment", by=1)
    assert len(env.server.session_state) == 1
    ep.close()
    assert env.server.session_state == {}
    with pytest.raises(EpisodeError, match="finished"):
        ep.call("increment", by=1)
    ep.close()  # idempotent

    dropped = lab.episode(env, rows("counter")[0])
    dropped.seed()
    assert len(env.server.session_state) == 1
    del dropped
    gc.collect()
    assert env.server.session_state == {}


def test_acting_before_seeding_says_what_to_do(lab, counter, rows):
    env, _ = _counter(lab, counter)
    ep = lab.episode(env, rows("counter")[0])
    with pytest.raises(EpisodeError, match=r"call seed\(\) first"):
        ep.call("increment")
    ep.seed()
    with pytest.raises(EpisodeError, match="no model"):
        ep.model_turn()
    with pytest.raises(AttributeError, match="speaks seed/verify; step"):
        ep.step("hit")
    ep.close()
    assert env.server.session_state == {}


async def test_async_forms(lab, counter, rows):
    env, model = _counter(lab, counter)
    async with lab.episode(env, rows("counter")[1], model=model) as ep:
        await ep.aseed()
        await ep.arun()
        rollout = await ep.averify()
    assert rollout.reward == 1.0
    assert env.server.session_state == {}


class Flaky(SimpleResourcesServer):
    """A tool whose output differs on every call: fork must refuse it."""

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=0.0)

    def setup_webserver(self):
        app = super().setup_webserver()

        @app.post("/token")
        async def token():
            return {"token": uuid.uuid4().hex}

        return app


def test_fork_refuses_a_diverging_replay(lab, rows):
    env = lab.serve(Flaky)
    ep = lab.episode(env, rows("calculator")[0])
    ep.seed()
    ep.say("thinking", role="user")
    ep.call("token")
    with pytest.raises(ForkDivergedError, match=r"flaky: fork diverged at step 0: the output of tool token"):
        ep.fork()
    ep.close()


def test_blackjack_by_hand_fork_counterfactual(lab, blackjack, rows):
    env = lab.serve(blackjack.BlackjackEnv)
    row = rows("blackjack")[0]  # seed 0: 20 against an ace
    ep = lab.episode(env, row)
    assert isinstance(ep, GymnasiumEpisode)
    observation, info = ep.reset()
    assert "total 20" in observation and info == {"seed": 0}
    branch = ep.fork()
    assert len(env.server.session_state) == 2
    hit = ep.step(("hit", {}))
    assert isinstance(hit, Step) and hit.terminated and hit.reward == -1.0
    stand = branch.step(call="stand", arguments={})
    assert stand.terminated and stand.reward == 1.0
    assert env.server.session_state == {}  # terminal steps released both
    assert ep.rollout.reward == -1.0 and branch.rollout.reward == 1.0
    assert json.loads(branch.steps[0].tool_outputs[0].output)["outcome"] == "win"
    # finished episodes join a run like any collected rollout
    episodes = Rollouts([ep.rollout, branch.rollout]).episodes
    assert episodes["reward"].tolist() == [-1.0, 1.0]
    assert episodes["environment"].tolist() == [env.name, env.name]
    assert episodes["terminated"].all()


def test_blackjack_by_model_rewards_sum_and_fork_mid_episode(lab, blackjack, rows):
    env = lab.serve(blackjack.BlackjackEnv)
    model = lab.serve_model(blackjack.policy, name="blackjack_policy")
    row = rows("blackjack")[2]  # 10 against a queen: the policy hits, then stands
    ep = lab.episode(env, row, model=model)
    ep.reset()
    first = ep.step()
    assert not first.terminated
    branch = ep.fork()  # replays the model's hit without asking the model
    assert branch.steps[0].tool_outputs[0].output == ep.steps[0].tool_outputs[0].output
    ep.run()
    branch.step("I hit")  # text actions work too
    branch.run()
    for episode in (ep, branch):
        rollout = episode.rollout
        assert rollout.terminated
        assert sum(s.reward for s in rollout.steps) == rollout.reward
        assert episode.frame["cumulative_reward"].iloc[-1] == rollout.reward
    assert env.server.session_state == {}


def test_blackjack_close_releases_an_unfinished_hand(lab, blackjack, rows):
    env = lab.serve(blackjack.BlackjackEnv)
    with lab.episode(env, rows("blackjack")[2]) as ep:
        ep.reset()
        ep.step("hit")
        assert len(env.server.session_state) == 1
    assert env.server.session_state == {}
    dropped = lab.episode(env, rows("blackjack")[2])
    dropped.reset()
    del dropped
    gc.collect()
    assert env.server.session_state == {}


def test_blackjack_through_the_agent_truncates_at_max_steps(lab, blackjack, rows):
    env = lab.serve(blackjack.BlackjackEnv)
    model = lab.serve_model(lambda request: "I think I will wait.", name="waiting_policy")
    agent = lab.serve_agent("gymnasium_agent", resources=env, model=model, max_steps=3)
    ep = lab.episode(agent, rows("blackjack")[2])
    ep.reset()
    steps = ep.run()
    assert len(steps) == 3 and steps[-1].truncated and ep.done
    assert ep.rollout.truncated
    assert ep.reward == pytest.approx(-0.3)
    assert env.server.session_state == {}
    with pytest.raises(AttributeError, match="speaks gymnasium; verify"):
        ep.verify()


class Shuffled(GymnasiumServer):
    """A reset observation that is not determined by the row: fork must refuse it."""

    async def reset(self, metadata, session_id=None):
        self.session_state[session_id] = True
        return uuid.uuid4().hex, {}

    async def step(self, action, metadata, session_id=None):
        return None, 0.0, False, False, {}


def test_gymnasium_fork_refuses_a_diverging_reset(lab, rows):
    env = lab.serve(Shuffled)
    ep = lab.episode(env, rows("blackjack")[0])
    ep.reset()
    with pytest.raises(ForkDivergedError, match="shuffled: fork diverged at step 0: the reset observation"):
        ep.fork()
    ep.close()
    assert env.server.session_state == {}


def test_sync_forms_keep_the_async_signature_and_docstring(lab, calculator, rows):
    import inspect

    env = lab.serve(calculator.CalculatorServer)
    with lab.episode(env, rows("calculator")[0]) as ep:
        for name in ("seed", "call", "say", "model_turn", "run", "verify", "close", "fork"):
            sync, coro = getattr(ep, name), getattr(ep, "a" + name)
            assert inspect.signature(sync) == inspect.signature(coro), name
            assert sync.__name__ == name and coro.__doc__.strip() in sync.__doc__
            assert not inspect.iscoroutinefunction(sync)


def test_a_failed_step_releases_the_episode_once(lab, blackjack, rows):
    class Jammed(blackjack.BlackjackEnv):
        closes: list = []

        async def step(self, action, metadata, session_id=None):
            if action.output_text == "jam":
                raise RuntimeError("the shoe jammed")
            return await super().step(action, metadata, session_id)

        async def close_episode(self, session_id):
            self.closes.append(session_id)
            return await super().close_episode(session_id)

    env = lab.serve(Jammed, closes=[])
    ep = lab.episode(env, rows("blackjack")[2])
    ep.reset()
    with pytest.raises(ServerError, match="the shoe jammed"):
        ep.step("jam")
    assert env.server.session_state == {} and len(env.server.closes) == 1
    ep.close()  # already released: nothing more is sent
    assert len(env.server.closes) == 1
    with pytest.raises(EpisodeError, match="finished"):
        ep.step("hit")


def test_a_reset_whose_answer_is_malformed_is_still_released_on_close(lab, rows):
    """The reset took effect on the server though its answer is not a reset reply: the episode holds
    the session from the reset on, so closing it releases the server's state."""
    from fastapi import Request
    from pydantic import ValidationError

    from gymlab.protocol.gymnasium import GymnasiumResetRequest

    class Garbled(Shuffled):
        async def _reset_route(self, request: Request, body: GymnasiumResetRequest) -> dict:
            await super()._reset_route(request, body)
            return {"observation": "dealt", "info": ["not", "a", "dict"]}

    env = lab.serve(Garbled)
    ep = lab.episode(env, rows("blackjack")[0])
    with pytest.raises(ValidationError):
        ep.reset()
    assert len(env.server.session_state) == 1
    ep.close()
    assert env.server.session_state == {}
