"""A notebook's failure paths: cancel, one line per error, rows checked against routes, sync policies."""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest

from gymlab import BaseVerifyRequest, BaseVerifyResponse, ConfigError, Lab, ServerError
from gymlab.examples import example_rows, load_environment
from gymlab.resources.tools import check_rows, rows_from, tools_from
from gymlab.testing.workers import wait_until


def _open_sessions(env) -> int:
    return httpx.get(env.url + "/health").json()["sessions"]["held"]


@pytest.mark.parametrize("wire", [False, True], ids=["in-process", "wire"])
def test_a_failing_verify_is_one_summary_line_and_the_trace_is_kept(calculator, capfd, wire):
    class Broken(calculator.CalculatorServer):
        async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
            return 1 / 0

    with Lab(wire=wire) as lab:
        env = lab.serve(Broken)
        agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(calculator.policy))
        rows = example_rows("calculator")[:4]
        capfd.readouterr()
        run = lab.run_many(agent, rows, repeats=5)
        printed = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
        assert len(run) == 20 and run.failures == {"verifier_error": 20}
        assert len(printed) <= 3, printed
        assert "20 of 20 episodes failed (verifier_error 20)" in printed[-1]
        # this server's entries: a stray server of an earlier test in this process, collected now, may log too
        logs = [e for e in lab.logs(last=None) if e.line.startswith("error: broken: ")]
        assert len(logs) == 20 and all("ZeroDivisionError" in e.trace for e in logs)
        assert "in verify" in logs[0].line and "test_day_two.py" in logs[0].line  # the user's own frame
        record = run[0]
        assert record.mask_sample and "ZeroDivisionError" in record.failure_trace
        assert "return 1 / 0" in record.failure_trace
        assert "test_day_two.py" in record.failure_reason  # where it raised, in the one-line reason
        with pytest.raises(ServerError, match="ZeroDivisionError") as raised:
            env.post("/verify", {**rows[0], "response": record.response.model_dump(mode="json")})
        assert "in verify" in str(raised.value)  # the user's frame, named in the error itself
        paths = [str(entry.path) for entry in raised.traceback]
        assert not any("aiohttp" in p or "concurrent" in p or "asyncio" in p for p in paths), paths
        assert raised.value.__cause__ is None and raised.value.__suppress_context__


@pytest.mark.parametrize("wire", [False, True], ids=["in-process", "wire"])
def test_cancel_stops_running_episodes_and_closes_their_sessions(counter, wire):
    """Over HTTP too: the client hangs up, and the agent cancels the episode it was running."""
    started = threading.Semaphore(0)
    release = threading.Event()

    def stuck(request):
        started.release()
        release.wait(60)  # a slow model: far slower than the test waits
        return counter.policy(request)

    with Lab(wire=wire) as lab:
        env = lab.serve(counter.CounterServer)
        agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(stuck))
        outcome: dict = {}

        def run() -> None:
            try:
                outcome["result"] = lab.run_many(agent, example_rows("counter"), repeats=4, concurrency=4)
            except BaseException as exc:  # the test reads what the run raised
                outcome["error"] = exc

        thread = threading.Thread(target=run)
        thread.start()
        try:
            for _ in range(4):
                assert started.acquire(timeout=60)
            assert _open_sessions(env) == 4
            assert lab.cancel() == 1
            thread.join(60)
            assert not thread.is_alive()
        finally:
            release.set()
        assert isinstance(outcome.get("error"), asyncio.CancelledError), outcome
        assert "4 running episode(s) stopped" in str(outcome["error"])
        wait_until(lambda: _open_sessions(env) == 0, 60, "the cancelled episodes' sessions closed")
        assert env.server.session_state == {}  # the environment's own per-episode state released too
        assert lab.last_run is not None and len(lab.last_run) == 0


def test_rows_are_checked_against_the_served_routes(calculator, counter):
    env_rows = example_rows("calculator")
    assert check_rows(calculator.CalculatorServer(), env_rows).ok
    wrong = rows_from(["guess"], tools=[{"type": "function", "name": "guess_number", "parameters": {"type": "object"}}])
    report = check_rows(calculator.CalculatorServer(), wrong)
    assert not report.ok and "row 0 tool `guess_number`; served: `square`" in str(report)
    extra = rows_from(
        ["4?"],
        tools=[
            {
                "type": "function",
                "name": "square",
                "parameters": {"type": "object", "properties": {"x": {"type": "integer"}}},
            }
        ],
    )
    assert "declares x, which /square does not take (it takes value)" in str(
        check_rows(calculator.CalculatorServer(), extra)
    )
    with Lab() as lab:
        env = lab.serve(calculator.CalculatorServer)
        agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(calculator.policy))
        with pytest.raises(ConfigError, match="guess_number"):
            lab.run_many(agent, wrong)
        assert lab.check(agent, env_rows).ok


@pytest.mark.parametrize(
    ("name", "cls"), [("calculator", "CalculatorServer"), ("counter", "CounterServer"), ("stateless", "ReverseServer")]
)
def test_tools_from_a_server_are_the_tools_its_rows_declare(name, cls):
    server = getattr(load_environment(name), cls)
    assert tools_from(server) == example_rows(name)[0]["responses_create_params"]["tools"]


def test_rows_from_prompts_and_fields(calculator):
    rows = rows_from(
        ["What is 3 squared?", "What is 5 squared?"], tools=calculator.CalculatorServer, expected=[9, 25], level="easy"
    )
    assert [r["expected"] for r in rows] == [9, 25] and {r["level"] for r in rows} == {"easy"}
    assert rows[1]["responses_create_params"]["input"] == [{"role": "user", "content": "What is 5 squared?"}]
    assert rows[0]["responses_create_params"]["tools"][0]["name"] == "square"
    with pytest.raises(ValueError, match="one per prompt"):
        rows_from(["a", "b"], expected=[1])


def test_a_sync_policy_answers_concurrently(calculator):
    """A blocking policy is called from a thread pool: with concurrency 4, four calls are in
    flight at once (each waits until it sees the others)."""
    lock = threading.Condition()
    in_flight = peak = 0

    def slow(request):
        nonlocal in_flight, peak
        with lock:
            in_flight += 1
            peak = max(peak, in_flight)
            lock.notify_all()
            lock.wait_for(lambda: in_flight >= 4 or peak >= 4, timeout=30)
        try:
            return calculator.policy(request)
        finally:
            with lock:
                in_flight -= 1

    with Lab() as lab:
        env = lab.serve(calculator.CalculatorServer)
        model = lab.serve_model(slow)
        agent = lab.serve_agent("simple_agent", resources=env, model=model)
        run = lab.run_many(agent, example_rows("calculator")[:2], repeats=2, concurrency=4)
        assert run.mean_reward == 1.0 and peak == 4
        assert not model.server._calls.inline  # a blocking policy stays in the pool

        fast = lab.serve_model(calculator.policy, name="fast")
        agent = lab.serve_agent("simple_agent", name="fast_agent", resources=env, model=fast)
        assert lab.run_many(agent, example_rows("calculator"), repeats=8).mean_reward == 1.0
        assert fast.server._calls.inline  # a rule-based policy is called on the loop: no thread hand-off


def test_a_trace_shaped_log_message_prints_as_one_line(calculator, capfd):
    import logging

    with Lab() as lab:
        env = lab.serve(calculator.CalculatorServer)
        capfd.readouterr()
        logging.getLogger("gymlab").error("Traceback (most recent call last):\n  File 'x', line 1\nValueError: bad")
        printed = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
        assert printed == ["gymlab error: ValueError: bad · lab.logs() has the trace"]
        assert "File 'x', line 1" in lab.logs(last=None)[-1].trace
        assert env.post("/square", {"value": 3}) == {"result": 9}
