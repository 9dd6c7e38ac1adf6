"""One lifespan per app, composed from the server's ``lifespan_parts()``: entered in order, left in
reverse, a part whose startup fails leaves the ones before it closed, and a restart gets fresh parts."""

from __future__ import annotations

import contextlib

import pytest
from pydantic import PrivateAttr

from gymlab import BaseVerifyRequest, BaseVerifyResponse, ServerStartError, SimpleResourcesServer


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
