"""Handles on a Lab's running servers: ``ServerHandle`` (``.url``, ``.post``, ``.stop``) and ``AgentHandle``
(``.run(row)``), and how to tell a Ray ``CellPool`` from a handle without importing Ray."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any

from gymlab._runtime.serve import LoopServer
from gymlab._sync import on_background_loop, run_sync
from gymlab._traces import Interrupted
from gymlab.protocol import Rollout
from gymlab.server import BaseServer


class ServerHandle(AbstractContextManager):
    """A running server: ``.url``, ``.server`` (the instance), ``.stop()``; a context manager."""

    def __init__(self, server: BaseServer, runner: LoopServer, lab: Any = None):
        self.server, self._runner, self._lab = server, runner, lab

    @property
    def name(self) -> str:
        return self.server.name

    @property
    def url(self) -> str:
        return self._runner.url

    @property
    def running(self) -> bool:
        return self._runner.running

    def stop(self) -> None:
        self.server.stop_work()
        self._runner.stop()
        if self._lab is not None and self._lab._handles.get(self.name) is self:
            del self._lab._handles[self.name]

    async def apost(self, path: str, body: Any) -> Any:
        return await on_background_loop(self.server.client.post_ok(self.url, path, body, server=self.name))

    def post(self, path: str, body: Any) -> Any:
        """POST JSON to this server from sync code; an error status raises ``ServerError``."""
        __tracebackhide__ = True
        return run_sync(self.apost(path, body))

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<{type(self).__name__} {self.name} {self.url} {state}>"


class AgentHandle(ServerHandle):
    """A running agent server: ``run(row)`` and ``await arun(row)`` return a ``Rollout``."""

    async def arun(self, row: dict[str, Any]) -> Rollout:
        return Rollout.model_validate(await self.apost("/run", row))

    def run(self, row: dict[str, Any]) -> Rollout:
        """One episode of ``row``; an Interrupt stops it (its session closed) and says so in one line."""
        __tracebackhide__ = True
        try:
            return run_sync(self.arun(row))
        except KeyboardInterrupt:
            raise Interrupted(f"gymlab: interrupted: {self.name}'s episode stopped and its session closed") from None


def is_pool(target: Any) -> bool:
    """True for a ``gymlab.cluster.pool.CellPool`` (checked without importing Ray or the pool)."""
    return type(target).__name__ == "CellPool" and type(target).__module__ == "gymlab.cluster.pool"
