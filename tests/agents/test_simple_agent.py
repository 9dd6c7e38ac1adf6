"""simple_agent over real loopback HTTP: the calculator episode, tool failures, max_steps, concurrency."""

import json

import pytest

from gymlab import BaseSeedSessionRequest, FunctionCall, FunctionCallOutput, ServerError, function_call


@pytest.fixture
def lab(lab_both):
    """Every test here runs with in-process dispatch and over loopback HTTP."""
    return lab_both


def _serve_calculator(lab, calculator, policy=None, **agent_config):
    env = lab.serve(calculator.CalculatorServer)
    model = lab.serve_model(policy or calculator.policy)
    return env, model, lab.serve_agent("simple_agent", resources=env, model=model, **agent_config)


def _outputs(rollout):
    return [i for i in rollout.response.output if isinstance(i, FunctionCallOutput)]


def test_calculator_episode(lab, calculator, rows):
    _, _, agent = _serve_calculator(lab, calculator)
    rollout = agent.run(rows("calculator")[0])
    assert rollout.reward == 1.0
    calls = [i for i in rollout.response.output if isinstance(i, FunctionCall)]
    assert [c.name for c in calls] == ["square"]
    assert json.loads(calls[0].arguments) == {"value": 4}
    (out,) = _outputs(rollout)
    assert out.call_id == calls[0].call_id
    assert json.loads(out.output) == {"result": 16}
    assert rollout.response.output_text == "The answer is 16."
    # per-step records: one per model turn, reward on the final step
    assert [s.reward for s in rollout.steps] == [0.0, 1.0]
    assert rollout.steps[0].tool_outputs[0].output == out.output
    assert rollout.response.usage.total_tokens > 0


def _scripted(*turns):
    """A policy that answers turn i with turns[i] (then a final message)."""

    def policy(request):
        n = sum(1 for i in request.input_items() if i.type == "function_call_output")
        return turns[n] if n < len(turns) else "done"

    return policy


@pytest.mark.parametrize(
    "call, expect",
    [
        (
            function_call("cube", {"value": 2}),
            lambda out: json.loads(out) == {"error": "unknown tool 'cube'; declared: square"},
        ),
        (
            FunctionCall(name="square", arguments="{not json", call_id="c1"),
            lambda out: json.loads(out)["error"].startswith("Invalid tool call arguments"),
        ),
        (
            function_call("square", {"value": "four"}),
            lambda out: json.loads(out)["detail"][0]["loc"] == ["body", "value"],
        ),
    ],
    ids=["unknown-tool", "invalid-json-arguments", "invalid-arguments-422"],
)
def test_tool_errors_reach_the_model(lab, calculator, rows, call, expect):
    _, _, agent = _serve_calculator(lab, calculator, _scripted([call]))
    rollout = agent.run(rows("calculator")[0])
    (out,) = _outputs(rollout)
    assert expect(out.output), out.output
    assert rollout.response.output_text == "done"
    assert len(rollout.steps) == 2


def test_crashing_tool_reaches_the_model(lab, calculator, rows):
    class Crashy(calculator.CalculatorServer):
        async def square(self, body: calculator.SquareRequest) -> calculator.SquareResponse:
            raise ZeroDivisionError("boom")

    env = lab.serve(Crashy)
    model = lab.serve_model(_scripted([function_call("square", {"value": 4})]))
    agent = lab.serve_agent("simple_agent", resources=env, model=model)
    rollout = agent.run(rows("calculator")[0])
    (out,) = _outputs(rollout)
    body = json.loads(out.output)
    assert body["server"] == "crashy" and body["route"] == "POST /square"
    assert body["error"] == "ZeroDivisionError" and "boom" in body["detail"]
    assert rollout.reward == 1.0  # the question's number was squared; the episode still ended


def test_max_steps_stops_a_model_that_never_answers(lab, calculator, rows):
    forever = lambda request: [function_call("square", {"value": 2})]  # noqa: E731
    _, _, agent = _serve_calculator(lab, calculator, forever, max_steps=3)
    rollout = agent.run(rows("calculator")[0])
    assert len(rollout.steps) == 3
    assert len(_outputs(rollout)) == 3
    assert rollout.response.status == "incomplete"
    assert rollout.response.incomplete_details == {"reason": "max_steps"}
    assert rollout.steps[-1].truncated


def test_empty_or_reasoning_only_output_ends_the_episode(lab, calculator, rows):
    from gymlab.protocol.responses import Reasoning, SummaryText

    _, _, agent = _serve_calculator(lab, calculator, lambda r: [Reasoning(id="rs_1", summary=[SummaryText(text="hm")])])
    rollout = agent.run(rows("calculator")[0])
    assert len(rollout.steps) == 1
    assert rollout.response.incomplete_details == {"reason": "empty_output"}
    assert rollout.reward == 0.0


def test_unknown_request_key_is_refused_naming_the_key(lab, calculator, rows):
    _, model, agent = _serve_calculator(lab, calculator)
    row = rows("calculator")[0]
    row["responses_create_params"]["temprature"] = 0.5
    for handle, path, body in ((agent, "/run", row), (model, "/v1/responses", row["responses_create_params"])):
        with pytest.raises(ServerError) as err:
            handle.post(path, body)
        assert err.value.status == 422
        assert "unknown key 'temprature' in responses_create_params" in str(
            err.value
        ) or "unknown key 'temprature'" in str(err.value)


def test_seed_failure_is_reported_naming_the_resources_server(lab, calculator, rows):
    class BadSeed(calculator.CalculatorServer):
        async def seed_session(self, body: BaseSeedSessionRequest):
            raise RuntimeError("database unavailable")

    env = lab.serve(BadSeed)
    model = lab.serve_model(calculator.policy)
    agent = lab.serve_agent("simple_agent", resources=env, model=model)
    with pytest.raises(ServerError) as err:
        agent.run(rows("calculator")[0])
    assert err.value.status == 502
    assert "resources server" in str(err.value) and "/seed_session" in str(err.value)
    assert "database unavailable" in str(err.value)


def test_200_concurrent_counter_rollouts_are_isolated(lab, counter, rows):
    env = lab.serve(counter.CounterServer)
    model = lab.serve_model(counter.policy)
    agent = lab.serve_agent("simple_agent", resources=env, model=model)
    base = rows("counter")
    batch = []
    for i in range(200):
        start, target = i % 7, i % 7 + 1 + i % 3
        row = json.loads(json.dumps(base[0]))
        row["responses_create_params"]["input"][0]["content"] = (
            f"The counter starts at {start}. Use the increment tool, one step at a time, until it reads {target}."
        )
        row.update(initial_count=start, target=target)
        batch.append(row)
    results = lab.run_many(agent, batch, concurrency=200, on_error="raise")
    assert len(results) == 200
    for row, r in zip(batch, results):
        assert r.reward == 1.0
        assert r.model_extra["final_count"] == row["target"]
        assert len(r.steps) == row["target"] - row["initial_count"] + 1
    assert env.server.session_state == {}


def test_concurrent_rollouts_never_share_a_cookie(lab, counter, rows):
    """A wrong target must fail only its own rollout."""
    env = lab.serve(counter.CounterServer)
    model = lab.serve_model(counter.policy)
    agent = lab.serve_agent("simple_agent", resources=env, model=model)
    good = rows("counter")[0]
    bad = {**good, "target": good["target"] + 100}
    results = lab.run_many(agent, [good, bad] * 20, concurrency=40, on_error="raise")
    assert [r.reward for r in results] == [1.0, 0.0] * 20
    assert env.server.session_state == {}


def test_a_model_failure_after_seed_releases_the_session(lab, counter, rows):
    env = lab.serve(counter.CounterServer)

    def broken(request):
        raise RuntimeError("model crashed")

    model = lab.serve_model(broken)
    agent = lab.serve_agent("simple_agent", resources=env, model=model)
    with pytest.raises(ServerError, match="model crashed"):
        agent.run(rows("counter")[0])
    assert env.server.session_state == {}
