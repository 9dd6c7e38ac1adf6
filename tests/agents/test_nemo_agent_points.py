"""NeMo Gym's agent points, against real servers: ``/aggregate_metrics`` proxied to the resources
server (its ``gym eval run`` asks the agent at its last step), null reserved keys in ``/run``'s
answer, and the ``skip_verification`` and ``execute_tools`` options with NeMo Gym's meaning."""

import json
import socket
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

from gymlab import ServerError, SingleAgentTurn
from gymlab.examples import load_environment
from gymlab.lab import AgentHandle
from gymlab.protocol import AggregateMetricsRequest
from gymlab.resources.simple import aggregate_metrics

blackjack = load_environment("blackjack")

#: The body NeMo Gym's collection posts (stripped verify responses: task index, repeat, reward, ...).
VERIFY_RESPONSES = [
    {"_ng_task_index": t, "_ng_rollout_index": r, "reward": float((t + r) % 2), "mask_sample": t == 2 and r == 1}
    for t in range(3)
    for r in range(2)
]


@pytest.fixture
def lab(lab_both):
    """Every test here runs with in-process dispatch and over loopback HTTP."""
    return lab_both


def _calculator_agent(lab, calculator, **config):
    env = lab.serve(calculator.CalculatorServer)
    return env, lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(calculator.policy), **config)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed on exit: nothing listens there


# -- /aggregate_metrics ----------------------------------------------------------------------------


def test_aggregate_metrics_is_the_resources_servers_answer(lab, calculator):
    env, agent = _calculator_agent(lab, calculator)
    body = {"verify_responses": VERIFY_RESPONSES}
    answer = agent.post("/aggregate_metrics", body)
    assert answer == env.post("/aggregate_metrics", body)
    assert answer["agent_metrics"]["num_samples"] == 6 and answer["agent_metrics"]["num_masked"] == 1
    assert [g["_ng_task_index"] for g in answer["group_level_metrics"]] == [0, 1, 2]


def test_aggregate_metrics_from_the_environment_not_the_agent(lab, calculator):
    class OwnMetrics(calculator.CalculatorServer):
        async def aggregate_metrics(self, body: AggregateMetricsRequest):
            return {"agent_metrics": {"solved": len(body.verify_responses)}, "key_metrics": {"solved": 1}}

    env = lab.serve(OwnMetrics)
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(calculator.policy))
    answer = agent.post("/aggregate_metrics", {"verify_responses": VERIFY_RESPONSES})
    assert answer["agent_metrics"] == {"solved": 6} and answer["key_metrics"] == {"solved": 1}


def test_aggregate_metrics_without_the_route_or_a_resources_server_uses_the_default(lab, rows):
    env = lab.serve(blackjack.BlackjackEnv)  # a Gymnasium server has no /aggregate_metrics
    agent = lab.serve_agent("gymnasium_agent", resources=env, model=lab.serve_model(blackjack.policy))
    expected = json.loads(aggregate_metrics(VERIFY_RESPONSES).model_dump_json())
    assert agent.post("/aggregate_metrics", {"verify_responses": VERIFY_RESPONSES}) == expected
    guess = load_environment("guess_number")
    embedded = lab.serve_agent(guess.GuessNumberAgent, model=lab.serve_model(guess.policy))
    assert embedded.post("/aggregate_metrics", {"verify_responses": VERIFY_RESPONSES}) == expected


def test_aggregate_metrics_with_the_resources_server_unreachable_is_a_502_naming_it(lab, calculator):
    url = f"http://127.0.0.1:{_closed_port()}"
    agent = lab.serve_agent("simple_agent", resources=url, model=lab.serve_model(calculator.policy))
    with pytest.raises(ServerError) as err:
        agent.post("/aggregate_metrics", {"verify_responses": VERIFY_RESPONSES})
    assert err.value.status == 502
    assert url in str(err.value) and "/aggregate_metrics" in str(err.value) and "resources_server" in str(err.value)


def test_aggregate_metrics_hostile_bodies(lab, calculator):
    env, agent = _calculator_agent(lab, calculator, max_metrics_body_bytes=4096)
    for bad in ({"verify_responses": "all of them"}, {"verify_responses": [1, 2]}, [1]):
        response = httpx.post(agent.url + "/aggregate_metrics", json=bad)
        assert response.status_code == 422, response.text
    huge = {"verify_responses": [{"_ng_task_index": i, "reward": 1.0} for i in range(1000)]}
    response = httpx.post(agent.url + "/aggregate_metrics", json=huge)
    assert response.status_code == 413 and "max_metrics_body_bytes" in response.text
    response = httpx.post(
        agent.url + "/aggregate_metrics", content=b"{not json", headers={"Content-Type": "application/json"}
    )
    assert response.status_code in (400, 422)
    body = {"verify_responses": VERIFY_RESPONSES}
    with ThreadPoolExecutor(8) as pool:  # repeated and concurrent: every answer the same
        answers = list(pool.map(lambda _: httpx.post(agent.url + "/aggregate_metrics", json=body).json(), range(24)))
    assert all(a == answers[0] for a in answers) and answers[0] == env.post("/aggregate_metrics", body)
    assert "set-cookie" not in httpx.post(agent.url + "/aggregate_metrics", json=body).headers  # sessionless


def test_aggregate_metrics_under_skip_verification_is_empty(lab, calculator):
    _, agent = _calculator_agent(lab, calculator, skip_verification=True)
    answer = agent.post("/aggregate_metrics", {"verify_responses": VERIFY_RESPONSES})
    assert answer == {"agent_metrics": {}, "key_metrics": {}, "group_level_metrics": []}


# -- reserved keys null --------------------------------------------------------------------------


def test_run_answers_write_the_reserved_failure_keys_null(lab, calculator, rows):
    env = lab.serve(blackjack.BlackjackEnv)
    agent = lab.serve_agent("gymnasium_agent", resources=env, model=lab.serve_model(blackjack.policy))
    answer = httpx.post(agent.url + "/run", json=rows("blackjack")[0], timeout=60).json()
    assert answer["failure_kind"] is None and answer["failure_reason"] is None and answer["mask_sample"] is False
    for added in ("failure_stage", "failure_trace", "judgements", "reward_components"):  # gymlab's own: unset
        assert added not in answer, added
    _, simple = _calculator_agent(lab, calculator)
    answer = httpx.post(simple.url + "/run", json=rows("calculator")[0], timeout=60).json()
    assert (answer["reward"], answer["failure_kind"], answer["failure_reason"]) == (1.0, None, None)
    assert "failure_stage" not in answer


# -- skip_verification ---------------------------------------------------------------------------


def test_skip_verification_grades_nothing_and_closes_the_session(lab, counter, rows):
    class Counted(counter.CounterServer):
        verifies: list = []

        async def verify(self, request, body: counter.CounterVerifyRequest):
            self.verifies.append(body)
            return await super().verify(request, body)

    env = lab.serve(Counted, verifies=[])
    model = lab.serve_model(counter.policy)
    agent = lab.serve_agent("simple_agent", resources=env, model=model, skip_verification=True)
    rollout = agent.run(rows("counter")[0])
    assert rollout.reward == 0.0 and rollout.model_extra["verification_skipped"] is True
    assert rollout.mask_sample is False and len(rollout.steps) == 4  # three increments and the answer
    assert env.server.verifies == [] and env.server.session_state == {}  # not verified, but released
    rewarded = lab.serve_agent(
        "simple_agent", resources=env, model=model, skip_verification=True, skip_verification_reward=0.25, name="r"
    )
    assert rewarded.run(rows("counter")[0]).reward == 0.25
    turn = lab.serve(
        SingleAgentTurn,
        handle_cls=AgentHandle,
        resources_server=env.url,
        agent_server=agent.url,
        skip_verification=True,
    )
    rollout = turn.run({"task_input": rows("counter")[0]})
    assert rollout.model_extra["verification_skipped"] is True and "close_follows" not in rollout.model_extra
    assert env.server.verifies == [] and env.server.session_state == {}


def test_skip_verification_is_refused_where_nothing_verifies(lab):
    env = lab.serve(blackjack.BlackjackEnv)
    with pytest.raises(Exception, match="never calls /verify.*skip_verification does not apply"):
        lab.serve_agent("gymnasium_agent", resources=env, model=lab.serve_model(blackjack.policy), skip_verification=1)


# -- execute_tools: false --------------------------------------------------------------------------


def test_execute_tools_false_returns_the_calls_unresolved(lab, calculator, rows):
    class Watched(calculator.CalculatorServer):
        squares: list = []

        async def square(self, body: calculator.SquareRequest) -> calculator.SquareResponse:
            self.squares.append(body.value)
            return await super().square(body)

    env = lab.serve(Watched, squares=[])
    agent = lab.serve_agent(
        "simple_agent", resources=env, model=lab.serve_model(calculator.policy), execute_tools=False
    )
    params = rows("calculator")[0]["responses_create_params"]
    response = agent.post("/v1/responses", params)
    assert [item["type"] for item in response["output"]] == ["function_call"]
    assert json.loads(response["output"][0]["arguments"]) == {"value": 4}
    assert env.server.squares == []  # nothing ran: the caller runs the calls
    with pytest.raises(ServerError) as err:
        agent.run(rows("calculator")[0])
    assert err.value.status == 400 and "execute_tools" in str(err.value)
    assert env.server.episode_sessions.counts()["held"] == 0  # refused before a seed
