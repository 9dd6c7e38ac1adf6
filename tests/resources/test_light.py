"""``gymlab.environment``: the README's first environment, written as plain functions, served, checked,
run and probed like any class; hooks written without annotations; the summary line's pointer to
``lab.logs()``; and what a hostile client or a degenerate model does to a light environment."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

import httpx
import pytest

from gymlab import BaseVerifyRequest, Lab, environment, function_call, lost_session_verification
from gymlab.examples import example_rows, load_environment
from gymlab.lab.runs import failure_line
from gymlab.probes import probe
from gymlab.resources.tools import rows_from, tools_from
from gymlab.testing import check_resources_session_contract

README = Path(__file__).resolve().parents[2] / "README.md"
SECRETS = [7, 42, 1, 99]


def readme_environment() -> str:
    """The code block under "Your first environment" in the README."""
    section = README.read_text().split("## Your first environment", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


@pytest.fixture(scope="module")
def guess_server():
    code = readme_environment()
    assert len(code.strip().splitlines()) <= 15 and code.startswith("from gymlab import environment")
    space: dict = {}
    exec(compile(code, str(README), "exec"), space)  # the README's code as written, imports included
    return space["GuessServer"]


def rows_for(server) -> list[dict]:
    prompts = [f"Find the secret number between 1 and 100 (game {i})." for i in range(len(SECRETS))]
    return rows_from(prompts, tools=server, secret=SECRETS)


def binary_search(request):
    """Bisects 1..100 over the hints so far; says the number alone once the hint is correct."""
    low, high, last = 1, 100, None
    for item in request.input_items():
        if item.type == "function_call":
            last = json.loads(item.arguments)["number"]
        elif item.type == "function_call_output":
            hint = json.loads(item.output)["hint"]
            if hint == "correct":
                return str(last)
            low, high = (last + 1, high) if hint == "higher" else (low, last - 1)
    return [function_call("guess", {"number": (low + high) // 2})]


@pytest.fixture(scope="module")
def served(guess_server):
    with Lab() as lab:
        env = lab.serve(guess_server)
        agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(binary_search), max_steps=10)
        yield lab, env, agent


def test_the_readme_environment_serves_its_tool_and_passes_lab_check(guess_server, served):
    lab, env, _ = served
    (tool,) = tools_from(guess_server)
    assert tool["name"] == "guess" and tool["parameters"]["properties"] == {"number": {"type": "integer"}}
    assert tool["description"] == "Guess the secret number; the hint says higher, lower or correct."
    assert lab.check(env, rows_for(guess_server)).ok
    bad = [
        {**{k: v for k, v in row.items() if k != "secret"}, "secrets": row["secret"]} for row in rows_for(guess_server)
    ]
    problems = lab.check(env, bad).problems
    assert any("secret" in p and "'secrets': a typo?" in p for p in problems), problems


def test_the_readme_environment_runs_and_keeps_state_by_the_episode(guess_server, served):
    lab, env, agent = served
    run = lab.run_many(agent, rows_for(guess_server), repeats=2, concurrency=8)
    assert [r.reward for r in run] == [1.0] * 8 and not run.failures
    assert env.server.session_state == {}  # every episode's state released after its verify


def test_the_readme_environment_passes_the_contract_checker(guess_server):
    server = guess_server()
    rules = check_resources_session_contract(
        server,
        {"episode_id": {"rollout_id": "r"}, "task_data": {"secret": 3}},
        keeps_state=True,
        holds_state=lambda sid: sid in server.session_state,
        verify_body={**rows_for(guess_server)[0], "response": {"output": []}},
        invalid_seed={"episode_id": {"rollout_id": "r"}, "task_data": {"secret": "three"}},
    )
    assert "state released exactly once" in rules and "verify after close masked" in rules
    assert server.session_state == {}


def test_the_readme_environment_is_probed_like_any_other(guess_server, served):
    lab, env, _ = served
    report = probe(lab, env, rows_for(guess_server), real_policy=binary_search)
    assert report.flagged == [], report.reasons()  # the exact check pays no shortcut
    assert report.real_reward(None) == 1.0 and len(report.rollouts) >= 5


def test_hostile_calls_get_a_clear_4xx_and_leave_nothing(guess_server, served):
    _, env, _ = served
    with httpx.Client(base_url=env.url, timeout=30) as client:
        assert client.post("/guess", json={"number": 5}).status_code == 409  # no episode: seed first
        seeded = client.post("/seed_session", json=rows_for(guess_server)[0])
        assert seeded.status_code == 200
        for body in ({"number": "five"}, {"number": 5, "extra": 1}, {}, [1, 2], {"number": {"deep": [[[]]]}}):
            reply = client.post("/guess", json=body)
            assert reply.status_code == 422, (body, reply.text)
        assert client.post("/guess", content=b"{" * 100_000).status_code in (400, 413, 422)
        huge = client.post("/guess", content=b'{"number": 1, "pad": "' + b"x" * (9 * 1024 * 1024) + b'"}')
        assert huge.status_code == 413
        answers = [client.post("/guess", json={"number": n}).json()["hint"] for n in (50, 5, 7)]
        assert answers == ["lower", "higher", "correct"]
        assert client.post("/close_session", json={}).status_code == 200
    assert env.server.session_state == {}


def test_a_model_that_guesses_forever_is_cut_by_the_agent_and_leaves_no_state(guess_server, served):
    lab, env, _ = served
    stuck = lab.serve_model(lambda request: [function_call("guess", {"number": 50})] * 3, name="stuck")
    agent = lab.serve_agent("simple_agent", name="stuck_agent", resources=env, model=stuck, max_steps=4)
    run = lab.run_many(agent, rows_for(guess_server))
    assert [r.reward for r in run] == [0.0] * 4 and all(len(r.steps) == 4 for r in run) and not run.failures
    assert env.server.session_state == {}


def test_concurrent_episodes_keep_their_own_state():
    def count(state: dict, by: int) -> dict:
        """Add to the episode's count."""
        state["count"] = state.get("count", 0) + by
        return {"count": state["count"]}

    counting = environment("Counting", tools=[count], verify=lambda state: float(state.get("count") == 3))

    async def episode(client: httpx.AsyncClient, times: int) -> int:
        await client.post("/seed_session", json={"responses_create_params": {"input": "x"}})
        replies = [await client.post("/count", json={"by": 1}) for _ in range(times)]
        return replies[-1].json()["count"]

    async def main() -> list[int]:
        server = counting()
        transport = httpx.ASGITransport(app=server.app)
        clients = [httpx.AsyncClient(transport=transport, base_url="http://test") for _ in range(20)]
        try:
            return await asyncio.gather(*(episode(c, 1 + i % 5) for i, c in enumerate(clients)))
        finally:
            for c in clients:
                await c.aclose()

    assert asyncio.run(main()) == [1 + i % 5 for i in range(20)]


def test_a_tool_or_verify_the_server_cannot_read_is_refused_when_defined():
    def untyped(state, number):
        return number

    with pytest.raises(TypeError, match=r"tool untyped: parameter 'number' has no type; write `number: int`"):
        environment("E", tools=[untyped], verify=lambda answer: 1.0)
    with pytest.raises(TypeError, match="E verify takes body; it may take answer, response, row, state|it may take"):
        environment("E", verify=lambda body: 1.0)

    def verify(row: dict, answer: str) -> float:
        return 1.0

    with pytest.raises(ValueError, match="a tool cannot be named 'verify'"):
        environment("E", tools=[verify], verify=verify)


def test_a_verify_that_returns_no_number_is_a_masked_failure_never_a_zero(served):
    lab = served[0]
    env = lab.serve(environment("Sloppy", verify=lambda answer: "yes"))
    says_yes = lab.serve_model(lambda request: "yes", name="says_yes")
    agent = lab.serve_agent("simple_agent", name="sloppy_agent", resources=env, model=says_yes)
    (record,) = lab.run_many(agent, example_rows("calculator")[:1], check=False)
    assert record.mask_sample and record.failure_kind == "verifier_error" and record.reward == 0.0
    assert "Sloppy verify must return a finite number or a bool, got 'yes'" in record.failure_reason


# -- hooks written without annotations ---------------------------------------------------------------


def test_an_unannotated_verify_reads_the_base_request_model(served):
    lab, calc = served[0], load_environment("calculator")

    class Plain(calc.CalculatorServer):
        async def verify(self, body):  # no annotation: the base's BaseVerifyRequest
            assert isinstance(body, BaseVerifyRequest)
            return await super().verify(body)

    env = lab.serve(Plain)
    model = lab.serve_model(calc.policy, name="plain_policy")
    agent = lab.serve_agent("simple_agent", name="plain_agent", resources=env, model=model)
    run = lab.run_many(agent, example_rows("calculator"))
    assert [r.reward for r in run] == [1.0] * len(run) and not run.failures


def test_an_unannotated_tool_is_refused_at_serve_time_naming_the_method():
    calc = load_environment("calculator")

    class Untyped(calc.CalculatorServer):
        def setup_webserver(self):
            app = super().setup_webserver()
            app.post("/double")(self.double)
            return app

        async def double(self, body):
            return body

    with pytest.raises(TypeError, match=r"Untyped: POST /double \(double\) has a parameter 'body' with no type"):
        Untyped().app  # noqa: B018  (building the app is serving's first step)


def test_a_hook_whose_untyped_parameters_cannot_be_told_is_refused_naming_it():
    calc = load_environment("calculator")

    class Two(calc.CalculatorServer):
        async def verify(self, body, extra):  # two untyped: which one is the body?
            return await super().verify(body)

    with pytest.raises(
        TypeError, match=r"Two.verify: parameter 'body' has no type annotation.*`body: YourRequestModel`"
    ):
        Two().app  # noqa: B018


def test_the_summary_points_to_lab_logs_only_when_it_holds_something(served, capsys):
    lab, calc = served[0], load_environment("calculator")

    class Lost(calc.CalculatorServer):
        async def verify(self, body: BaseVerifyRequest):
            return lost_session_verification(body)  # masked, and nothing logged

    def broken(request):
        raise RuntimeError("the model server is down")

    rows = example_rows("calculator")[:2]
    model = lab.serve_model(calc.policy, name="calc_policy")
    lost = lab.serve_agent("simple_agent", name="lost_agent", resources=lab.serve(Lost), model=model)
    logged_before = len(lab.logs(None))
    run = lab.run_many(lost, rows)
    quiet = capsys.readouterr().err
    assert run.failures == {"session_lost": 2} and len(lab.logs(None)) == logged_before
    assert "2 of 2 episodes failed" in quiet and "lab.logs()" not in quiet
    down = lab.serve_agent(
        "simple_agent",
        name="down_agent",
        resources=lab.serve(calc.CalculatorServer, name="calc_down"),
        model=lab.serve_model(broken, name="broken"),
    )
    lab.run_many(down, rows)
    loud = capsys.readouterr().err
    assert len(lab.logs(None)) > logged_before and "lab.logs() has the server-side traces" in loud
    assert failure_line(run) is not None and "lab.logs()" not in failure_line(run)


def test_a_sync_tool_or_verify_past_the_budget_fails_masked_and_frees_the_loop(served):
    """Sync tools and verifies run as every sync hook does (``call_hook``): in a thread, within
    ``work_budget_seconds``; past it the verify is masked, never a 0, and the server keeps answering."""
    import threading

    gate = threading.Event()

    def stall(state, number: int) -> dict:
        """Waits for the gate."""
        gate.wait(30)
        return {"number": number}

    def verify(answer):
        gate.wait(30)
        return 1.0

    lab = served[0]
    env = lab.serve(environment("Stalling", tools=[stall], verify=verify), work_budget_seconds=0.2)
    model = lab.serve_model(lambda request: "done", name="stalling_model")
    agent = lab.serve_agent("simple_agent", name="stalling_agent", resources=env, model=model)
    try:
        (record,) = lab.run_many(agent, example_rows("calculator")[:1], check=False)
        assert record.mask_sample and record.failure_kind == "verifier_error" and record.reward == 0.0
        assert "0.2 s" in record.failure_reason and "work_budget_seconds" in record.failure_reason
        with httpx.Client(base_url=env.url, timeout=30) as client:
            client.post("/seed_session", json={})
            answer = client.post("/stall", json={"number": 3})
            assert answer.status_code >= 500 and "0.2 s" in answer.text, answer.text
            assert client.get("/health").status_code == 200
    finally:
        gate.set()
