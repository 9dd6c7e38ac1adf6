"""single_agent_turn over real loopback HTTP: a stateful episode end to end, the observation rules,
task shapes, restore without a new seed, pass-through of masks, and a close on every path."""

import json

import pytest
from fastapi import Request

from gymlab import (
    BaseVerifyRequest,
    BaseVerifyResponse,
    ResourcesSeedSessionRequest,
    ResourcesSeedSessionResponse,
    ResponseCreateParams,
    ServerError,
    SimpleResourcesServer,
    SingleAgentTurn,
)
from gymlab._sync import run_sync
from gymlab.envservers.single_agent_turn import agent_request, parse_task
from gymlab.lab import AgentHandle
from gymlab.registry import environment_server_class


@pytest.fixture
def lab(lab_both):
    """Every test here runs with in-process dispatch and over loopback HTTP."""
    return lab_both


def serve_turn(lab, env, policy, **agent_config):
    model = lab.serve_model(policy)
    agent = lab.serve_agent("simple_agent", model=model, **{"resources": env, **agent_config})
    turn = lab.serve(SingleAgentTurn, handle_cls=AgentHandle, resources_server=env.url, agent_server=agent.url)
    return turn, agent


def test_counter_end_to_end_with_its_reward_and_no_state_left(lab, counter, rows):
    env = lab.serve(counter.CounterServer)
    turn, _ = serve_turn(lab, env, counter.policy)
    for i, row in enumerate(rows("counter")):
        rollout = turn.run({"task_id": f"counter/{i}", "task_input": row})
        assert rollout.reward == 1.0 and rollout.mask_sample is False
        assert rollout.model_extra["final_count"] == row["target"]
        calls = [item for item in rollout.response.output if item.type == "function_call"]
        assert len(calls) == row["target"] - row["initial_count"]
        (prompt,) = rollout.responses_create_params.input  # the authored request, echoed by verify
        assert prompt.text == row["responses_create_params"]["input"][0]["content"]
        (step,) = rollout.steps
        assert step.reward == 1.0 and step.terminated
    assert env.server.session_state == {}
    assert len(env.server.episode_sessions) == 0
    assert len(env.server.episode_sessions.fences) == len(rows("counter"))


def test_a_wrong_target_scores_zero_and_still_leaves_no_state(lab, counter, rows):
    env = lab.serve(counter.CounterServer)
    turn, _ = serve_turn(lab, env, counter.policy)
    row = rows("counter")[0]
    rollout = turn.run(
        {"responses_create_params": row["responses_create_params"], "task_data": {"initial_count": 0}, "target": 99}
    )
    assert rollout.reward == 0.0 and rollout.model_extra["final_count"] == 3
    assert env.server.session_state == {}


class Observing(SimpleResourcesServer):
    """Answers the seed with task_data["observation"] (absent: unset); records seeds and verify bodies."""

    seeds: list = []
    verified: list = []

    async def seed_session(self, body: ResourcesSeedSessionRequest):
        self.seeds.append(body.model_dump(mode="json"))
        if "observation" not in body.task_data:
            return ResourcesSeedSessionResponse(resources_session_id=body.resources_session_id)
        return ResourcesSeedSessionResponse(
            resources_session_id=body.resources_session_id, observation=body.task_data["observation"]
        )

    async def verify(self, request: Request, body: BaseVerifyRequest) -> BaseVerifyResponse:
        self.verified.append(await request.json())
        return BaseVerifyResponse(**body.model_dump(), reward=0.5)


@pytest.fixture
def observed(lab):
    env = lab.serve(Observing, seeds=[], verified=[])
    requests = []

    def policy(request):
        requests.append(request.model_dump(mode="json", exclude_unset=True))
        return "done"

    turn, _ = serve_turn(lab, env, policy)
    return env.server, turn, requests


def _user(text):
    return {"type": "message", "role": "user", "content": text}


DEV = {"type": "message", "role": "developer", "content": "Be brief."}
SETTINGS = {
    "temperature": 0.25,
    "max_output_tokens": 64,
    "tools": [{"type": "function", "name": "look", "description": "", "parameters": {}, "strict": True}],
}


@pytest.mark.parametrize(
    "authored, observation, model_input",
    [
        ("Solve it.", "The workspace is ready.", [_user("Solve it."), _user("The workspace is ready.")]),
        ("", "The workspace is ready.", [_user("The workspace is ready.")]),
        (
            [DEV, _user("Solve it.")],
            "The workspace is ready.",
            [DEV, _user("Solve it."), _user("The workspace is ready.")],
        ),
        ("Solve it.", None, [_user("Solve it.")]),
        ("Solve it.", "", [_user("Solve it.")]),
        ("Solve it.", "<unset>", [_user("Solve it.")]),
        ([DEV, _user("Solve it.")], None, [DEV, _user("Solve it.")]),
    ],
    ids=["string", "empty-string", "list", "explicit-null", "explicit-empty", "omitted", "list-null"],
)
def test_observation_rules(observed, authored, observation, model_input):
    server, turn, requests = observed
    params = {"input": authored, **SETTINGS}
    task_data = {} if observation == "<unset>" else {"observation": observation}
    rollout = turn.run({"responses_create_params": params, "task_data": task_data})
    (sent,) = requests
    assert sent["input"] == model_input
    assert {k: sent[k] for k in SETTINGS} == SETTINGS  # model settings and tools as authored
    (verified,) = server.verified
    assert verified["responses_create_params"] == params  # the authored request, not the observed one
    assert verified["close_follows"] is True
    assert rollout.reward == 0.5
    assert rollout.steps[0].info == ({"observation": observation} if observation and observation != "<unset>" else {})


def test_agent_request_leaves_an_unobserved_request_unchanged():
    params = ResponseCreateParams.model_validate({"input": "Hi", "temperature": 0.1})
    assert agent_request(params, None) == agent_request(params, "") == {"input": "Hi", "temperature": 0.1}
    assert agent_request(params, "Look.")["input"] == [_user("Hi"), _user("Look.")]


def test_restoring_at_agent_invocation_supplies_the_observation_once_without_seeding(observed):
    server, turn, requests = observed
    sat = turn.server
    task = parse_task({"responses_create_params": {"input": "Go."}, "task_data": {"observation": "Ready."}})
    handles = run_sync(sat.seed(task))
    restored = type(handles).model_validate_json(handles.model_dump_json())  # e.g. read back from disk
    for h in (handles, restored):
        run_sync(sat.invoke_agent(h, task.params))
    assert [r["input"] for r in requests] == [[_user("Go."), _user("Ready.")]] * 2
    assert len(server.seeds) == 1
    run_sync(sat.close(handles))


def test_task_shapes_and_seed_body(observed):
    server, turn, _ = observed
    turn.run(
        {
            "task_id": "weather/7",
            "rollout_id": "r-9",
            "attempt": 2,
            "task_input": {"responses_create_params": {"input": "x"}, "city": "SF", "task_data": {"unit": "C"}},
        }
    )
    turn.run(
        {"responses_create_params": {"input": "y"}, "task_data": {"city": "SF"}, "city": "SF", "_ng_task_index": 3}
    )
    first, second = server.seeds
    assert first["resources_session_id"].startswith("rs-")
    assert first["episode_id"] == {"rollout_id": "r-9", "attempt": 2}
    assert first["task_id"] == {"taskset": "weather", "task_id": "7"}
    assert first["task_data"] == {"unit": "C", "city": "SF"}
    assert second["task_id"] == {"taskset": "", "task_id": "3"} and second["task_data"] == {"city": "SF"}
    assert first["resources_session_id"] != second["resources_session_id"]
    assert [v["city"] for v in server.verified] == ["SF", "SF"]  # task fields reach verify flat


@pytest.mark.parametrize(
    "body, message",
    [
        (
            {"responses_create_params": {"input": "x"}, "task_data": {"city": "SF"}, "city": "NYC"},
            'field \'city\' is "NYC" in the row but "SF" in task_data',
        ),
        ({"task_id": "a/1", "task_input": {"city": "SF"}}, "the task has no responses_create_params"),
        (
            {"responses_create_params": {"input": "x", "temprature": 1}},
            "responses_create_params: unknown key 'temprature'",
        ),
        ({"task_input": [1]}, "task_input must be an object"),
    ],
    ids=["conflicting-field", "no-params", "bad-params", "task-input-not-object"],
)
def test_malformed_tasks_are_refused_with_422(observed, body, message):
    server, turn, _ = observed
    with pytest.raises(ServerError) as err:
        turn.post("/run", body)
    assert err.value.status == 422 and message in str(err.value)
    assert server.seeds == []


def test_mask_and_failure_fields_pass_through(lab, counter, rows):
    class Judged(counter.CounterServer):
        async def verify(self, request: Request, body: counter.CounterVerifyRequest):
            answer = await super().verify(request, body)
            return answer.model_copy(
                update={"mask_sample": True, "failure_kind": "judge_failed", "failure_reason": "the judge timed out"}
            )

    env = lab.serve(Judged)
    turn, _ = serve_turn(lab, env, counter.policy)
    rollout = turn.run({"task_input": rows("counter")[0]})
    assert (rollout.mask_sample, rollout.failure_kind, rollout.failure_reason) == (
        True,
        "judge_failed",
        "the judge timed out",
    )


def test_a_failing_agent_still_closes_the_session(lab, counter, rows):
    env = lab.serve(counter.CounterServer)

    def broken(request):
        raise RuntimeError("model crashed")

    turn, _ = serve_turn(lab, env, broken)
    with pytest.raises(ServerError) as err:
        turn.run({"task_input": rows("counter")[0]})
    assert err.value.status == 502 and "/v1/responses" in str(err.value) and "model crashed" in str(err.value)
    failure = err.value.failure  # typed, from the error body: the model failed during the agent's turn
    assert (failure.kind, failure.stage, failure.status) == ("provider_unavailable", "agent", 500)
    assert env.server.session_state == {} and len(env.server.episode_sessions) == 0
    assert len(env.server.episode_sessions.fences) == 1


def test_a_rejected_seed_keeps_its_422(lab, counter, rows):
    env = lab.serve(counter.CounterServer)
    turn, _ = serve_turn(lab, env, counter.policy)
    with pytest.raises(ServerError) as err:
        turn.run({"task_input": {**rows("counter")[0], "initial_count": "many"}})
    assert err.value.status == 422
    assert "invalid task_data: initial_count: Input should be a valid integer" in str(err.value)
    assert env.server.session_state == {}


def test_an_agent_bound_elsewhere_refuses_the_episode(lab, counter, calculator, rows):
    env = lab.serve(counter.CounterServer)
    other = lab.serve(calculator.CalculatorServer)
    turn, _ = serve_turn(lab, env, counter.policy, resources=other)
    with pytest.raises(ServerError) as err:
        turn.run({"task_input": rows("counter")[0]})
    assert err.value.status == 502 and "bound to resources server" in str(err.value)
    assert env.server.session_state == {}


def test_registered_by_name():
    assert environment_server_class("single_agent_turn") is SingleAgentTurn
    assert json.loads(
        SingleAgentTurn(resources_server="http://r", agent_server="http://a").model_dump_json(
            include={"resources_server", "agent_server"}
        )
    ) == {"resources_server": "http://r", "agent_server": "http://a"}


def test_a_seed_that_failed_after_taking_effect_is_closed_by_its_id(lab, counter, rows):
    class HalfSeeded(counter.CounterServer):
        async def seed_session(self, request: Request, body: ResourcesSeedSessionRequest):
            await super().seed_session(request, body)
            raise RuntimeError("the reply was lost")

    env = lab.serve(HalfSeeded)
    turn, _ = serve_turn(lab, env, counter.policy)
    with pytest.raises(ServerError) as err:
        turn.run({"task_input": rows("counter")[0]})
    assert err.value.status == 502 and "the reply was lost" in str(err.value)
    assert env.server.session_state == {}  # released by the close, which named the ID and sent no cookie
    assert len(env.server.episode_sessions.fences) == 1


def test_100_concurrent_episodes_are_isolated(lab, counter, rows):
    env = lab.serve(counter.CounterServer)
    turn, _ = serve_turn(lab, env, counter.policy)
    base = rows("counter")[0]
    tasks = []
    for i in range(100):
        start, target = i % 5, i % 5 + 1 + i % 3
        params = json.loads(json.dumps(base["responses_create_params"]))
        params["input"][0]["content"] = (
            f"The counter starts at {start}. Use the increment tool, one step at a time, until it reads {target}."
        )
        tasks.append(
            {
                "task_id": f"counter/{i}",
                "task_input": {"responses_create_params": params, "initial_count": start, "target": target},
            }
        )
    results = lab.run_many(turn, tasks, concurrency=100, on_error="raise")
    assert [r.model_extra["final_count"] for r in results] == [t["task_input"]["target"] for t in tasks]
    assert all(r.reward == 1.0 for r in results)
    assert env.server.session_state == {} and len(env.server.episode_sessions) == 0
