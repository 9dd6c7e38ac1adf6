"""One lifespan per app, composed from the server's ``lifespan_parts()``: entered in order, left in
reverse, a part whose startup fails leaves the ones before it closed, and a restart gets fresh parts."""

from __future__ import annotations

import asyncio
import contextlib
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from pydantic import PrivateAttr

from gymlab import BaseVerifyRequest, BaseVerifyResponse, ServerStartError, SimpleResourcesServer
from gymlab.testing.workers import wait_until


class Parts(SimpleResourcesServer):
    fail_at: str | None = None
    _log: list[str] = PrivateAttr(default_factory=list)

    def lifespan_parts(self):
        return [*super().lifespan_parts(), self._part("client"), self._part("judge")]

    @contextlib.asynccontextmanager
    async def _part(self, name: str):
        if name == self.fail_at:
            raise ConnectionRefusedError(f"{name} at 127.0.0.1:9 refused the connection")
        self._log.append(f"enter {name}")
        try:
            yield
        finally:
            self._log.append(f"exit {name}")

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=1.0)


def test_parts_are_entered_in_order_left_in_reverse_and_fresh_at_each_start(lab):
    server = Parts()
    for _ in range(2):  # served, stopped, served again: each start asks for its parts anew
        with lab.serve(server):
            assert server._log[-2:] == ["enter client", "enter judge"]  # both entered before it serves
    assert server._log == ["enter client", "enter judge", "exit judge", "exit client"] * 2


def test_a_part_that_fails_at_startup_names_its_cause_and_the_parts_before_it_are_closed(lab):
    server = Parts(name="parts_failing", fail_at="judge")
    with pytest.raises(ServerStartError, match=r"parts_failing: its startup failed: ConnectionRefusedError: judge"):
        lab.serve(server)
    assert server._log == ["enter client", "exit client"]


class Hanging(Parts):
    """A route that never answers (a hung grader): a stop must still end its lifespan."""

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        await asyncio.Event().wait()
        raise AssertionError("unreachable")


def test_a_request_still_running_past_the_grace_is_cut_and_the_lifespan_still_ends():
    from gymlab._runtime.serve import ThreadedServer

    server = Hanging(name="hanging")
    runner = ThreadedServer(server.app, name="hanging").start()
    body = {"responses_create_params": {"input": "hi"}, "response": {"output": []}}
    with ThreadPoolExecutor(1) as pool:
        sent = pool.submit(httpx.post, runner.url + "/verify", json=body, timeout=60)
        wait_until(lambda: len(runner.server.server_state.tasks) == 1, 30, "the request running")
        runner.stop(timeout=0.2)
        assert sent.result(timeout=30).status_code == 500  # cut: the client is answered, never left waiting
    assert not runner.server.server_state.tasks  # no request task left pending on the loop
    assert server._log[-2:] == ["exit judge", "exit client"]  # the lifespan's stop parts ran
