"""One cell: the servers of one replica, in a Ray actor on one node, run as a ``Lab`` runs them
(127.0.0.1, calls in-process; a ``num_workers`` > 1 server as ``gymlab serve`` runs it). The driver
reaches its servers only through ``request`` (docs/cluster.md).
"""

from __future__ import annotations

import os
import subprocess
from typing import Any

from gymlab._http.client import Client
from gymlab._runtime.serve import LoopServer, free_port
from gymlab._sync import on_background_loop, run_sync
from gymlab.cluster.recipe import ordered, unpack
from gymlab.errors import ConfigError


class CellGone(ConnectionError):
    """A cell's actor is gone (its process or node died): its in-flight rollouts go to another cell."""


class Cell:
    """The body of the cell actor (``gymlab.cluster.pool`` wraps it with ``ray.remote``)."""

    def __init__(self, files: list[tuple[str, str, str | None]], blob: bytes, index: int, log_level: str = "warning"):
        """``files`` and ``blob``: the recipes as ``gymlab.cluster.recipe.pack`` made them."""
        recipes = unpack(files, blob)
        self.index = index
        self.client = Client()  # the cell's servers reach each other in-process, through its registry
        self.urls: dict[str, str] = {}
        self.roles: dict[str, str] = {}
        self.servers: dict[str, Any] = {}
        self._runners: list[LoopServer] = []
        self.processes: dict[str, subprocess.Popen] = {}  # server -> its process (num_workers > 1)
        for recipe in ordered(recipes):
            self.roles[recipe.name] = recipe.role
            if recipe.workers > 1:
                self.urls[recipe.name] = self._spawn(recipe)
                self.servers[recipe.name] = recipe.build(self.urls)  # for its routes only: not served here
                continue
            instance = self.servers[recipe.name] = recipe.build(self.urls)
            if "error_traces" not in instance.model_fields_set:
                instance.error_traces = True  # a crash's trace travels to the failed record, as in a Lab
            instance.use_client(self.client)
            runner = LoopServer(
                instance.app, instance.host, 0, instance.name, log_level, registry=self.client.registry
            ).start()
            self._runners.append(runner)
            self.urls[recipe.name] = runner.url

    def _spawn(self, recipe) -> str:
        """``recipe``'s server as ``gymlab serve`` runs it (a process and its workers): its URL."""
        from gymlab.collection.serve_one import spawn, wait_healthy

        if recipe.target is None or recipe.raw is None:
            raise ConfigError(
                f"{recipe.name}: num_workers={recipe.workers} in a cell runs the server as processes that import "
                "it from its file; serve it from a config (gymlab collect/serve CONFIG --ray), or give the "
                "pool more replicas with num_workers=1"
            )
        port = free_port()
        config = {**recipe.raw, **{k: self.urls[v] for k, v in recipe.refs.items()}}
        config.update(name=recipe.name, host="127.0.0.1", port=port)
        process = spawn(config, recipe.target, recipe.where)  # it dies with this process (serve_one)
        self.processes[recipe.name] = process
        url = f"http://127.0.0.1:{port}"
        if why := wait_healthy(process, url, 60):
            self.close()
            raise ConfigError(
                f"{recipe.where or recipe.name}: its {recipe.workers} workers did not start in the cell: {why}"
            )
        return url

    def info(self) -> dict[str, Any]:
        """Where this cell runs: node id and address, process id, its servers and their roles."""
        import ray

        return {
            "index": self.index,
            "node_id": ray.get_runtime_context().get_node_id(),
            "node_ip": ray.util.get_node_ip_address(),
            "pid": os.getpid(),
            "urls": dict(self.urls),
            "processes": {name: process.pid for name, process in self.processes.items()},
            "roles": dict(self.roles),
            "protocols": {n: protocol_of(s) for n, s in self.servers.items() if self.roles[n] == "resources"},
        }

    async def request(
        self, server: str, path: str, body: bytes, headers: dict[str, str], timeout: float | None = None
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """One POST to ``server`` of this cell (in-process unless it runs several workers), as it answered."""
        call = self.client.request(
            "POST", self.urls[server], path, body, headers=headers, server=server, timeout=timeout
        )
        reply = await on_background_loop(call)
        return reply.status, reply.headers, reply.body

    def check(self, server: str, rows: list[dict[str, Any]]):
        """The rows' declared tools against ``server``'s routes (``gymlab.resources.tools.check_rows``)."""
        from gymlab.resources.tools import check_rows

        return check_rows(self.servers[server], rows)

    def close(self) -> None:
        """Stop the cell's servers and close its client (the pool kills the actor after)."""
        for runner in reversed(self._runners):
            runner.stop()
        self._runners.clear()
        run_sync(self.client.close())
        from gymlab.collection.serve_one import stop

        stop(list(self.processes.values()))
        self.processes.clear()


def protocol_of(server: Any) -> str | None:
    """'seed/verify' or 'gymnasium' from a resources server's routes (what ``lab.episode`` opens)."""
    paths = {getattr(r, "path", None) for r in server.app.routes}
    if {"/seed_session", "/verify"} <= paths:
        return "seed/verify"
    if {"/reset", "/step"} <= paths:
        return "gymnasium"
    return None
