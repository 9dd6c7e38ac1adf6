"""Lab: servers in background threads (start, replace, stop, startup errors in the caller)."""

import contextlib
import socket

import httpx
import pytest

from gymlab import BaseVerifyRequest, BaseVerifyResponse, Lab, ServerStartError, SimpleResourcesServer


def test_three_servers_and_stop(calculator):
    lab = Lab()
    env = lab.serve(calculator.CalculatorServer)
    model = lab.serve_model(calculator.policy)
    agent = lab.serve_agent("simple_agent", resources=env, model=model)
    assert {env.url, model.url, agent.url} and len({env.url, model.url, agent.url}) == 3
    assert all(url.startswith("http://127.0.0.1:") for url in (env.url, model.url, agent.url))
    health = httpx.get(env.url + "/health").json()
    assert (health["status"], health["server"], health["sessions"]["open"]) == ("ok", "calculator_server", 0)
    lab.close()
    assert not env.running
    with pytest.raises(httpx.ConnectError):
        httpx.get(env.url + "/health")


def test_serving_the_same_name_replaces_the_old_server(lab, calculator):
    first = lab.serve(calculator.CalculatorServer, name="calc")

    class Redefined(calculator.CalculatorServer):
        async def square(self, body: calculator.SquareRequest) -> calculator.SquareResponse:
            return calculator.SquareResponse(result=-1)

    url, old_runner = first.url, first._runner
    second = lab.serve(Redefined, name="calc")
    assert not old_runner.running
    assert second is first and second.url == url  # the same port, at once (SO_REUSEADDR)
    assert isinstance(first.server, Redefined)
    assert first.post("/square", {"value": 3}) == {"result": -1}
    assert httpx.post(url + "/square", json={"value": 3}).json() == {"result": -1}
    assert list(lab.servers) == ["calc"]


def test_an_agent_bound_before_a_reserve_reaches_the_fixed_server(lab, calculator, rows):
    """The day-two loop: a verify is wrong, the class is fixed and served again; the agent made
    before the fix is not re-created and its next run is graded by the fixed class."""

    class Harsh(calculator.CalculatorServer):
        async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
            answer = await super().verify(body)
            return answer.model_copy(update={"reward": 0.0})

    env = lab.serve(Harsh, name="calc")
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(calculator.policy))
    row = rows("calculator")[0]
    assert agent.run(row).reward == 0.0
    lab.serve(calculator.CalculatorServer, name="calc")
    assert agent.run(row).reward == 1.0
    wire_agent = lab.serve_agent("simple_agent", name="wire", resources=env.url, model=agent.server.model_server)
    assert wire_agent.run(row).reward == 1.0


def test_handle_is_a_context_manager(lab, calculator):
    with lab.serve(calculator.CalculatorServer) as env:
        assert env.post("/square", {"value": 2}) == {"result": 4}
    assert not env.running and "calculator_server" not in lab.servers


class Broken(SimpleResourcesServer):
    """A server whose startup fails (its lifespan raises)."""

    async def verify(self, body):
        return None

    def lifespan_parts(self):
        return [*super().lifespan_parts(), self._judge()]

    @contextlib.asynccontextmanager
    async def _judge(self):
        raise ConnectionRefusedError("judge at 127.0.0.1:9 refused the connection")
        yield


def test_startup_failure_raises_the_real_cause_alone_and_keeps_the_trace(lab, capfd):
    capfd.readouterr()
    with pytest.raises(
        ServerStartError,
        match=r"broken: its startup failed: ConnectionRefusedError: judge at 127\.0\.0\.1:9 refused the connection",
    ):
        lab.serve(Broken)
    assert capfd.readouterr().err.strip() == ""  # nothing printed beside the error itself
    kept = lab.logs(last=None)
    assert any("Traceback" in e.trace and "in lifespan" in e.trace for e in kept), kept
    assert any(e.line == "error: ConnectionRefusedError: judge at 127.0.0.1:9 refused the connection" for e in kept)


def test_port_in_use_is_a_clear_error(lab, calculator):
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", 0))
    blocker.listen()
    try:
        with pytest.raises(ServerStartError, match="cannot bind 127.0.0.1:.*port=0"):
            lab.serve(calculator.CalculatorServer, port=blocker.getsockname()[1])
    finally:
        blocker.close()


def test_abstract_verify_must_be_written():
    with pytest.raises(TypeError, match="verify"):
        SimpleResourcesServer()


def test_session_cookie_is_signed_with_a_random_secret(calculator):
    a, b = calculator.CalculatorServer(), calculator.CalculatorServer()
    assert a.session_secret.get_secret_value() != b.session_secret.get_secret_value()
    assert a.session_secret.get_secret_value() not in repr(a)


def test_sync_calls_work_inside_a_running_loop(lab, calculator, rows):
    """As in a Jupyter kernel: a sync helper called while this thread's loop is running."""
    import asyncio

    env = lab.serve(calculator.CalculatorServer)
    model = lab.serve_model(calculator.policy)
    agent = lab.serve_agent("simple_agent", resources=env, model=model)

    async def cell():
        sync_reward = agent.run(rows("calculator")[0]).reward
        async_reward = (await agent.arun(rows("calculator")[0])).reward
        return sync_reward, async_reward

    assert asyncio.run(cell()) == (1.0, 1.0)


def test_lab_refuses_several_workers_naming_the_way_to_get_them(lab, calculator):
    with pytest.raises(ServerStartError, match="num_workers=4.*gymlab serve"):
        lab.serve(calculator.CalculatorServer, num_workers=4)


def test_a_running_runs_finished_records_are_read_from_its_one_buffer():
    """Records finished out of order: those finished from the start on sit in the store's one buffer,
    the rest wait as lines; the memory sink reads both in the order they finished (what a cancel keeps)."""
    from benchmarks.records import synthetic
    from gymlab.lab.runs import Rollouts
    from gymlab.lab.store import StoreBuilder
    from gymlab.run.engine import Job, Outcome, RunState
    from gymlab.run.sinks import MemorySink

    records = synthetic(6, 2)
    builder, state = StoreBuilder(len(records)), RunState()
    sink = MemorySink(builder, "agent", "env", raise_errors=False, state=state)
    rows = [{"_ng_task_index": p, "_ng_rollout_index": 0} for p in range(6)]
    expected = [
        r.model_copy(
            update={**rows[p], "agent_ref": {"type": "responses_api_agents", "name": "agent"}, "env_name": "env"}
        )
        for p, r in enumerate(records)
    ]
    for position in (2, 0, 5, 1):
        sink(Job(position, rows[position], None, "agent"), Outcome(records[position]))
    assert state.finished is sink and builder.ready == 3 and sorted(builder.ahead_of) == [5]
    kept = Rollouts(state.finished)  # what lab.last_run holds after a cancel
    assert [r.model_dump() for r in kept] == [expected[p].model_dump() for p in (2, 0, 5, 1)]
    for position in (3, 4):
        sink(Job(position, rows[position], None, "agent"), Outcome(records[position]))
    store = builder.finish()
    assert [store.record(i).model_dump() for i in range(6)] == [r.model_dump() for r in expected]
    assert len(store.buffer) == sum(len(store.line(i)) for i in range(6)) and not builder.data
    assert sink.completed() == [1, 3, 0, 4, 5, 2]  # each position's rank in the order of finishing


def test_a_lab_keeps_its_server_logs_after_uvicorns_own_logging_config_ran():
    """uvicorn's default ``log_config`` (a server run outside a Lab) removes the handlers of the
    loggers it names; the next Lab puts its log book back, so its servers' errors still reach lab.logs()."""
    import logging.config

    from uvicorn.config import LOGGING_CONFIG

    with Lab():
        pass
    logging.config.dictConfig(LOGGING_CONFIG)  # what uvicorn.Config(app) does with its default log_config

    with Lab() as lab:
        with pytest.raises(ServerStartError):
            lab.serve(Broken)
        assert any("in lifespan" in e.trace for e in lab.logs(last=None))


def test_a_run_stopped_by_an_error_keeps_its_finished_episodes_in_last_run(lab, calculator):
    """Not only an Interrupt: a run that raises (on_error="raise" here; the breaker's RunStopped goes
    the same way) leaves the episodes that finished before it in ``lab.last_run``."""
    from gymlab.errors import GymlabError
    from gymlab.examples import example_rows

    def policy(request):
        if "7 squared" in str(request.input):
            raise RuntimeError("the model broke on this row")
        return calculator.policy(request)

    env = lab.serve(calculator.CalculatorServer)
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(policy))
    rows = example_rows("calculator")[:2]  # 4 squared, then 7 squared
    with pytest.raises(GymlabError):
        lab.run_many(agent, rows, concurrency=1, on_error="raise")
    assert lab.last_run is not None and [r.reward for r in lab.last_run] == [1.0]  # the first finished
