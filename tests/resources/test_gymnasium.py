"""The Gymnasium protocol over real loopback HTTP: GymnasiumServer, gymnasium_agent and the examples."""

import json
import warnings

import pytest
from pydantic import Field

import gymlab
from gymlab import FunctionCall, FunctionCallOutput, GymnasiumServer, Message, ServerError
from gymlab._http.client import Cookies
from gymlab._sync import run_sync
from gymlab.examples import example_rows, load_environment
from gymlab.protocol import failure_kinds


@pytest.fixture
def blackjack():
    return load_environment("blackjack")


def _serve(lab, env_cls, policy, **agent_config):
    env = lab.serve(env_cls)
    model = lab.serve_model(policy)
    return env, lab.serve_agent("gymnasium_agent", resources=env, model=model, **agent_config)


def _say(text):
    return lambda request: text


class CountingEnv(GymnasiumServer):
    """Steps until ``metadata['end_at']`` (terminated) and records every close; crashes at ``crash_at``."""

    closed: list[str] = Field(default_factory=list)

    async def reset(self, metadata, session_id=None):
        self.session_state[session_id] = {"n": 0}
        return "go", {"started": True}

    async def step(self, action, metadata, session_id=None):
        state = self.session_state[session_id]
        state["n"] += 1
        if state["n"] == metadata.get("crash_at"):
            raise RuntimeError("the table collapsed")
        info = dict(metadata.get("info_at", {}).get(str(state["n"]), {}))
        info["metadata_keys"] = sorted(metadata)
        return f"step {state['n']}", 0.5, state["n"] == metadata.get("end_at"), False, info

    async def close_session(self, session_id):
        self.closed.append(session_id)
        await super().close_session(session_id)


def _row(**fields):
    return {"responses_create_params": {"input": "play"}, **fields}


# --- blackjack ------------------------------------------------------------------------------------


def test_blackjack_per_step_rewards_sum_to_the_run_reward(lab, blackjack):
    env, agent = _serve(lab, blackjack.BlackjackEnv, blackjack.policy)
    outcomes = set()
    for row in example_rows("blackjack"):
        rollout = agent.run(row)
        assert rollout.reward == pytest.approx(sum(s.reward for s in rollout.steps))
        assert rollout.terminated and not rollout.truncated
        assert [s.terminated for s in rollout.steps] == [False] * (len(rollout.steps) - 1) + [True]
        assert rollout.info["outcome"] in ("win", "loss", "push", "bust")
        outcomes.add(rollout.info["outcome"])
        # the reset observation is the first user message of the recorded request
        first = rollout.responses_create_params.input[-1]
        assert first.role == "user" and first.content.startswith("Your hand:")
        # every call in the episode's output is hit or stand; non-final steps' outputs follow their calls
        calls = [i for i in rollout.response.output if isinstance(i, FunctionCall)]
        assert {c.name for c in calls} <= {"hit", "stand"} and len(calls) == len(rollout.steps)
        assert len([i for i in rollout.response.output if isinstance(i, FunctionCallOutput)]) == len(rollout.steps) - 1
    assert len(outcomes) > 1
    assert env.server.session_state == {}


def test_blackjack_penalties_are_per_step_rewards(lab, blackjack):
    """An invalid action costs 0.1 on its own step; the sum still equals the run reward."""

    def policy(request):
        assistant_turns = sum(1 for i in request.input_items() if i.type == "message" and i.role == "assistant")
        return "let me think" if assistant_turns == 0 else "stand"

    row = {**example_rows("blackjack")[0], "responses_create_params": {"input": "Blackjack: say hit or stand."}}
    env, agent = _serve(lab, blackjack.BlackjackEnv, policy)
    rollout = agent.run(row)
    rewards = [s.reward for s in rollout.steps]
    assert rewards[0] == pytest.approx(-0.1) and len(rewards) == 2
    assert rollout.reward == pytest.approx(sum(rewards))
    assert rollout.steps[0].observation.startswith("Your hand:")
    assert env.server.session_state == {}


def test_blackjack_is_reproducible_from_the_seed(lab, blackjack):
    _, agent = _serve(lab, blackjack.BlackjackEnv, blackjack.policy)
    row = example_rows("blackjack")[3]
    a, b = agent.run(row), agent.run(row)
    assert [s.observation for s in a.steps] == [s.observation for s in b.steps]
    assert [s.info["player_total"] for s in a.steps] == [s.info["player_total"] for s in b.steps]
    assert a.reward == b.reward
    other = agent.run({**row, "seed": 1234})
    assert other.responses_create_params.input[-1].content != a.responses_create_params.input[-1].content


def test_agent_max_steps_forces_truncation_and_releases_the_episode(lab, blackjack):
    env, agent = _serve(lab, blackjack.BlackjackEnv, _say("hmm"), max_steps=3)
    rollout = agent.run({**example_rows("blackjack")[0], "max_turns": 50})
    assert rollout.truncated and not rollout.terminated
    assert len(rollout.steps) == 3 and rollout.steps[-1].truncated
    assert rollout.reward == pytest.approx(-0.3)
    assert rollout.response.status == "incomplete"
    # the environment never ended the hand; the agent's /close released it
    assert env.server.session_state == {}


def test_environment_truncation_releases_state(lab, blackjack):
    env, agent = _serve(lab, blackjack.BlackjackEnv, _say("hmm"))
    rollout = agent.run({**example_rows("blackjack")[0], "max_turns": 2})
    assert rollout.truncated and not rollout.terminated
    assert [(s.truncated, s.terminated) for s in rollout.steps] == [(False, False), (True, False)]
    assert env.server.session_state == {}


# --- session cleanup ----------------------------------------------------------------------------


def test_state_released_once_on_terminate(lab):
    env, agent = _serve(lab, CountingEnv, _say("ok"))
    rollout = agent.run(_row(end_at=2))
    assert rollout.terminated and rollout.reward == 1.0
    assert env.server.session_state == {} and len(env.server.closed) == 1
    # metadata is the row without responses_create_params (and without the step's response)
    assert rollout.steps[0].info["metadata_keys"] == ["end_at"]
    assert [s.observation for s in rollout.steps] == ["step 1", "step 2"]
    users = [i.content for i in rollout.response.output if isinstance(i, Message) and i.role == "user"]
    assert users == ["step 1"]


def test_exception_in_step_releases_state_and_is_reported(lab):
    env, agent = _serve(lab, CountingEnv, _say("ok"))
    with pytest.raises(ServerError) as err:
        agent.run(_row(crash_at=2, end_at=5))
    message = str(err.value)
    assert err.value.status == 502
    for part in (
        "gymnasium_agent",
        "resources server",
        "counting_env",
        "POST /step",
        "HTTP 500",
        "the table collapsed",
    ):
        assert part in message
    assert env.server.session_state == {} and len(env.server.closed) == 1


def test_exception_in_step_is_a_json_500_naming_server_and_route(lab):
    env = lab.serve(CountingEnv)
    cookies = Cookies()
    row = _row(crash_at=1)
    run_sync(lab.client.post(env.url, "/reset", row, cookies))
    assert len(env.server.session_state) == 1
    reply = run_sync(lab.client.post(env.url, "/step", {**row, "response": {"output": []}}, cookies))
    assert reply.status == 500
    body = reply.json()
    assert body["server"] == "counting_env" and body["route"] == "POST /step" and body["error"] == "RuntimeError"
    assert env.server.session_state == {}


class CrashingResetEnv(CountingEnv):
    async def reset(self, metadata, session_id=None):
        self.session_state[session_id] = {"n": 0, "half": "built"}
        raise ValueError("no table free")


def test_exception_in_reset_releases_state(lab):
    env, agent = _serve(lab, CrashingResetEnv, _say("ok"))
    with pytest.raises(ServerError, match=r"POST /reset failed with HTTP 500: .*raised ValueError: no table free"):
        agent.run(_row())
    assert env.server.session_state == {} and len(env.server.closed) == 1


def test_model_failure_mid_episode_releases_state(lab):
    def policy(request):
        if any(i.type == "message" and i.role == "assistant" for i in request.input_items()):
            raise RuntimeError("model fell over")
        return "ok"

    env, agent = _serve(lab, CountingEnv, policy)
    with pytest.raises(ServerError, match="model fell over"):
        agent.run(_row(end_at=5))
    # the environment never ended the episode; the agent's /close released it, once
    assert env.server.session_state == {} and len(env.server.closed) == 1


def test_reset_on_a_live_session_closes_the_old_episode_and_close_releases(lab):
    env = lab.serve(CountingEnv)
    cookies = Cookies()
    for _ in range(2):
        assert run_sync(lab.client.post(env.url, "/reset", _row(), cookies)).json() == {
            "observation": "go",
            "info": {"started": True},
        }
    assert len(env.server.session_state) == 1 and len(env.server.closed) == 1
    assert run_sync(lab.client.post(env.url, "/close", {}, cookies)).json() == {"closed": True}
    assert run_sync(lab.client.post(env.url, "/close", {}, cookies)).json() == {"closed": False}
    assert env.server.session_state == {} and len(env.server.closed) == 2


def test_no_verify_route(lab):
    env = lab.serve(CountingEnv)
    reply = run_sync(lab.client.post(env.url, "/verify", _row(response={"output": []})))
    assert reply.status == 404


# --- masks and failure kinds --------------------------------------------------------------------

_MASK = {"mask_sample": True, "failure_kind": "judge_failed", "failure_reason": "judge timed out"}


def test_mask_from_the_final_step_is_reported(lab):
    _, agent = _serve(lab, CountingEnv, _say("ok"))
    rollout = agent.run(_row(end_at=2, info_at={"2": _MASK}))
    assert (rollout.mask_sample, rollout.failure_kind, rollout.failure_reason) == (
        True,
        "judge_failed",
        "judge timed out",
    )
    # lifted out of info into the step response
    assert not set(_MASK) & set(rollout.info) and not set(_MASK) & set(rollout.steps[-1].info)


def test_mask_from_an_earlier_step_is_dropped(lab):
    _, agent = _serve(lab, CountingEnv, _say("ok"))
    rollout = agent.run(_row(end_at=2, info_at={"1": _MASK}))
    assert (rollout.mask_sample, rollout.failure_kind, rollout.failure_reason) == (False, None, None)
    assert rollout.reward == 1.0


REFERENCE_KINDS = (
    "transport_unreachable transport_peer_drop transport_timeout transport_local_resource agent_run_error "
    "agent_request_failed agent_timeout agent_command_not_allowed judge_failed judge_unparseable verifier_error "
    "provider_unavailable provider_quota_exhausted provider_oom_killed session_lost session_expired "
    "session_release_failed cancelled kill_shaped shutdown persistence_failed cohort_incomplete"
).split()


def test_failure_kind_registry_is_the_reference_vocabulary():
    fk = gymlab.failure_kinds
    # the reference's vocabulary, and gymlab's one addition: an answer past a hop's size cap (not retried)
    assert sorted(fk.FAILURE_KINDS) == sorted([*REFERENCE_KINDS, "response_too_large"])
    assert all(fk.FAILURE_KINDS[name] for name in REFERENCE_KINDS)
    assert fk.validate_failure_kind("blackjack:deck_exhausted") == "blackjack:deck_exhausted"
    assert fk.validate_failure_kind(None) is None
    with pytest.warns(
        UserWarning, match=r"unregistered failure_kind 'judge_down_once': use one of .*judge_failed.*'<server>:<kind>'"
    ):
        assert fk.validate_failure_kind("judge_down_once") == "judge_down_once"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the second time the same name is not warned about again
        assert fk.validate_failure_kind("judge_down_once") == "judge_down_once"


@pytest.mark.parametrize("kind", REFERENCE_KINDS)
def test_a_step_reporting_a_reference_kind_gives_a_masked_rollout_of_that_kind(lab, kind):
    env = lab.serve(CountingEnv)
    agent = lab.serve_agent("gymnasium_agent", resources=env, model=lab.serve_model(lambda request: "go"))
    rollout = agent.run(
        _row(end_at=1, info_at={"1": {"mask_sample": True, "failure_kind": kind, "failure_reason": "it broke"}})
    )
    assert (rollout.mask_sample, rollout.failure_kind, rollout.failure_reason) == (True, kind, "it broke")


def test_an_unregistered_kind_from_a_step_is_kept_and_warned_not_refused(lab):
    env = lab.serve(CountingEnv)
    cookies = Cookies()
    row = _row(info_at={"1": {"mask_sample": True, "failure_kind": "judge_down"}})
    run_sync(lab.client.post(env.url, "/reset", row, cookies))
    failure_kinds._warned.discard("judge_down")  # warned once per process: this test runs in two labs
    with pytest.warns(UserWarning, match="unregistered failure_kind 'judge_down'"):
        reply = run_sync(lab.client.post(env.url, "/step", {**row, "response": {"output": []}}, cookies))
    assert reply.status == 200 and reply.json()["failure_kind"] == "judge_down" and reply.json()["mask_sample"]


def test_lost_session_is_a_masked_truncation(lab, blackjack):
    env = lab.serve(blackjack.BlackjackEnv)
    row = example_rows("blackjack")[0]
    reply = run_sync(lab.client.post(env.url, "/step", {**row, "response": {"output": []}}, Cookies()))
    body = reply.json()
    assert reply.status == 200 and body["truncated"] and body["mask_sample"] and body["failure_kind"] == "session_lost"


# --- concurrency --------------------------------------------------------------------------------


def test_500_concurrent_blackjack_episodes_are_isolated(lab, blackjack):
    env, agent = _serve(lab, blackjack.BlackjackEnv, blackjack.policy)
    base = example_rows("blackjack")[0]
    seeds = range(20)
    reference = {s: agent.run({**base, "seed": s}) for s in seeds}

    def trace(r):
        return [(s.observation, s.reward, s.terminated) for s in r.steps]

    rows = [{**base, "seed": i % 20} for i in range(500)]
    rollouts = lab.run_many(agent, rows, concurrency=500, on_error="raise")
    assert len(rollouts) == 500
    for row, rollout in zip(rows, rollouts):
        assert trace(rollout) == trace(reference[row["seed"]])
    assert env.server.session_state == {}


# --- the other examples -------------------------------------------------------------------------


def test_calculator_gym_episode(lab):
    calc = load_environment("calculator_gym")
    env, agent = _serve(lab, calc.CalculatorEnv, calc.policy)
    rollout = agent.run(example_rows("calculator_gym")[0])
    assert rollout.reward == 1.0 and rollout.terminated
    call, out, answer = rollout.response.output
    assert isinstance(call, FunctionCall) and call.name == "square"
    assert (
        isinstance(out, FunctionCallOutput) and out.call_id == call.call_id and json.loads(out.output) == {"result": 16}
    )
    assert answer.text == "The answer is 16."
    assert [s.reward for s in rollout.steps] == [0.0, 1.0]
    assert rollout.steps[0].tool_outputs[0].output == out.output
    assert rollout.response.usage.total_tokens > 0


def test_qa_follow_ups_and_final_grade(lab):
    qa = load_environment("qa")
    env, agent = _serve(lab, qa.QAEnv, qa.policy)
    row = example_rows("qa")[2]
    rollout = agent.run(row)
    assert rollout.reward == 1.0 and rollout.info["correct"]
    assert [s.observation for s in rollout.steps] == [*row["follow_ups"], None]
    users = [i.content for i in rollout.response.output if isinstance(i, Message) and i.role == "user"]
    assert users == row["follow_ups"]
    wrong = agent.run({**row, "expected_answer": "41"})
    assert wrong.reward == 0.0 and not wrong.info["correct"] and wrong.terminated
    assert env.server.session_state == {}


# --- the spec's samples, as written (imports changed to gymlab) ---------------------------------

from gymlab import GymnasiumServer  # noqa: E402


@pytest.fixture
def lab(lab_both):
    """Every test here runs with in-process dispatch and over loopback HTTP."""
    return lab_both


class CalculatorEnv(GymnasiumServer):
    async def step(self, action, metadata, session_id=None):
        calls = [item for item in action.output if item.type == "function_call"]
        if calls:
            outputs = []
            for call in calls:
                args = json.loads(call.arguments)
                if call.name == "square":
                    result = {"result": args["value"] ** 2}
                else:
                    result = {"error": f"Unknown action: {call.name}"}
                outputs.append(self.tool_output(call, result))
            return None, 0.0, False, False, {"tool_outputs": outputs}
        return None, 1.0, True, False, {}


def initialize(metadata):
    return {"target": str(metadata["target"]), "moves": 0}


def apply_action_and_score(state, action):
    state["moves"] += 1
    done = state["target"] in action.output_text
    return float(done), done


class StatefulEnv(GymnasiumServer):
    async def reset(self, metadata, session_id=None):
        self.session_state[session_id] = initialize(metadata)
        return "Environment ready.", {}

    async def step(self, action, metadata, session_id=None):
        state = self.session_state[session_id]
        reward, done = apply_action_and_score(state, action)
        return None, reward, done, False, {}


def test_spec_calculator_env(lab):
    calc = load_environment("calculator_gym")
    env, agent = _serve(lab, CalculatorEnv, calc.policy)
    rollout = agent.run(example_rows("calculator_gym")[1])
    assert rollout.reward == 1.0
    assert json.loads(rollout.steps[0].tool_outputs[0].output) == {"result": 49}
    unknown = FunctionCall(name="cube", arguments='{"value": 2}', call_id="c1")
    _, agent2 = _serve(lab, CalculatorEnv, lambda request: [unknown] if len(request.input_items()) == 1 else "done")
    rollout = agent2.run(example_rows("calculator_gym")[1])
    assert json.loads(rollout.steps[0].tool_outputs[0].output) == {"error": "Unknown action: cube"}


def test_spec_stateful_env(lab):
    def count_up(request):
        return str(1 + sum(1 for i in request.input_items() if i.type == "message" and i.role == "assistant"))

    env, agent = _serve(lab, StatefulEnv, count_up)
    rollouts = lab.run_many(agent, [_row(target=3), _row(target=1), _row(target=2)], on_error="raise")
    assert [[s.reward for s in r.steps] for r in rollouts] == [[0.0, 0.0, 1.0], [1.0], [0.0, 1.0]]
    assert rollouts[0].responses_create_params.input[-1].content == "Environment ready."
    assert env.server.session_state == {}


def test_gymnasium_agent_is_registered():
    from gymlab.registry import agent_class

    assert agent_class("gymnasium_agent") is gymlab.GymnasiumAgent
