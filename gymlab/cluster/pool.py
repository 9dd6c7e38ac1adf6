"""The driver's side of the cells: ``CellPool`` starts them, sends each rollout to the cell with the
fewest in flight, and retries a rollout on another cell when its cell dies.

The driver is the only writer of records: a cell answers ``/run`` and the driver records the
answer once, so a rollout retried after its cell died is still recorded once. A pool is built by
``lab.serve_pool(...)`` (a notebook) or ``gymlab collect/serve CONFIG --ray`` (a YAML config).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

from gymlab.cluster.cell import Cell
from gymlab.cluster.connect import connect
from gymlab.cluster.recipe import Recipe, portable_recipes
from gymlab.errors import ConfigError, ServerError, ServerStartError
from gymlab.protocol.failure_kinds import Failure

_pool_ids = itertools.count()


class CellGone(ConnectionError):
    """A cell's actor is gone (its process or node died): its in-flight rollouts go to another cell."""


@dataclass(eq=False)
class CellRef:
    """One cell as the driver sees it: its actor, where it runs, and its load."""

    index: int
    actor: Any
    info: dict[str, Any] = field(default_factory=dict)
    in_flight: int = 0
    done: int = 0
    alive: bool = True

    @property
    def node_id(self) -> str:
        return self.info.get("node_id", "")

    @property
    def node_ip(self) -> str:
        return self.info.get("node_ip", "")

    async def call(self, method: str, *args: Any) -> Any:
        """Await one actor method; a dead actor raises ``CellGone``."""
        from ray.exceptions import RayActorError

        try:
            return await getattr(self.actor, method).remote(*args)
        except RayActorError as exc:
            self.alive = False
            raise CellGone(f"cell {self.index} on node {self.node_ip or '?'} is gone: {exc}") from None

    def __repr__(self) -> str:
        state = "" if self.alive else " dead"
        return f"<cell {self.index} node {self.node_ip} ({self.node_id[:6]}) {self.in_flight} in flight, {self.done} done{state}>"


class CellPool:
    """Replicas of a set of servers on a Ray cluster, one actor ("cell") per replica.

    ``run_many`` and ``lab.episode`` take a pool as they take an agent handle: each rollout runs
    whole inside one cell (its sessions never cross machines). ``close()`` kills the actors.
    """

    def __init__(
        self,
        recipes: list[Recipe],
        *,
        replicas: int = 1,
        cpus_per_replica: float = 1.0,
        name: str | None = None,
        address: str | None = None,
        runtime_env: dict[str, Any] | None = None,
        startup_timeout: float = 120.0,
        log_level: str = "warning",
        ray_options: dict[str, Any] | None = None,
    ):
        if replicas < 1:
            raise ConfigError(f"replicas must be at least 1, got {replicas}")
        agents = [r.name for r in recipes if r.role == "agent"]
        if not agents:
            raise ConfigError("a cell needs an agent (or environment) server to answer /run; none was given")
        ray = connect(address)
        self.recipes = recipes
        self.agents = agents
        self.agent = agents[0]
        self.name = name or self.agent
        self.id = next(_pool_ids)
        self.cpus_per_replica = cpus_per_replica
        self._closed = False
        self._bridges: dict[int, dict[str, Any]] = {}  # cell -> server -> its driver-side URL (episodes)
        options: dict[str, Any] = {"num_cpus": cpus_per_replica, "scheduling_strategy": "SPREAD"}
        if runtime_env:
            options["runtime_env"] = runtime_env
        options.update(ray_options or {})
        remote = ray.remote(Cell).options(**options)
        shipped = portable_recipes(recipes)
        self.cells = [CellRef(i, remote.remote(shipped, i, log_level)) for i in range(replicas)]
        self._start(ray, startup_timeout)

    def _start(self, ray, timeout: float) -> None:
        refs = {cell.actor.info.remote(): cell for cell in self.cells}
        ready, pending = ray.wait(list(refs), num_returns=len(refs), timeout=timeout)
        try:
            if pending:
                raise ServerStartError(
                    f"{self.name}: {len(pending)} of {len(self.cells)} cells did not start within {timeout:.0f}s; "
                    f"each asks for {self.cpus_per_replica:g} CPU and the cluster has "
                    f"{ray.available_resources().get('CPU', 0):g} free of {ray.cluster_resources().get('CPU', 0):g}: "
                    "ask for fewer replicas or cpus_per_replica, or add nodes"
                )
            for ref in ready:
                try:
                    refs[ref].info = ray.get(ref)
                except Exception as exc:
                    raise ServerStartError(f"{self.name}: cell {refs[ref].index} failed to start: {exc}") from None
        except BaseException:
            self.close()
            raise

    # -- dispatch ---------------------------------------------------------------------------------

    @property
    def live(self) -> list[CellRef]:
        return [c for c in self.cells if c.alive]

    def pick(self) -> CellRef:
        """The live cell with the fewest rollouts in flight; none left raises ``CellGone``."""
        live = self.live
        if not live:
            raise CellGone(f"{self.name}: no live cell left of {len(self.cells)}")
        return min(live, key=lambda c: (c.in_flight, c.done, c.index))

    async def apost_run(self, job: dict[str, Any], *, agent: str | None = None, timeout: float | None = None):
        """``POST /run`` of ``job`` in one cell, retried on another while cells die; ``(status, body)``.

        No live cell left raises ``ServerError`` with a ``transport_unreachable`` failure at admission.
        """
        agent = agent or self.agent
        while True:
            try:
                cell = self.pick()
            except CellGone as exc:
                failure = Failure(kind="transport_unreachable", stage="admission", server=self.name, message=str(exc))
                raise ServerError(self.name, "POST /run", 0, str(exc), "start the pool again", failure) from None
            try:
                reply = await self.arun_on(cell, agent, job, timeout)
            except CellGone:
                continue  # its rollout runs again on another cell: the driver records it once
            return reply

    async def arun_on(self, cell: CellRef, agent: str, job: dict[str, Any], timeout: float | None):
        """``POST /run`` in ``cell``: ``(status, body)``; ``CellGone`` when the cell died meanwhile."""
        cell.in_flight += 1
        try:
            reply = await cell.call("run", agent, job, timeout)
        finally:
            cell.in_flight -= 1
        cell.done += 1
        return reply

    async def arun(self, row: dict[str, Any]):
        """One episode of ``row`` through the pool's agent: a ``Rollout`` (what ``run_many`` calls)."""
        from gymlab._sync import on_background_loop
        from gymlab.client import Reply, _parsed
        from gymlab.protocol import Rollout

        status, body = await on_background_loop(self.apost_run(row))
        return Rollout.model_validate(_parsed(Reply(status, body), "/run", self.name))

    def run(self, row: dict[str, Any]):
        """``arun`` from sync code."""
        __tracebackhide__ = True
        from gymlab._sync import run_sync

        return run_sync(self.arun(row))

    # -- what the Lab asks ------------------------------------------------------------------------

    def env_name(self, agent: str | None = None) -> str | None:
        """The name of the resources server ``agent`` is bound to in each cell."""
        recipe = next(r for r in self.recipes if r.name == (agent or self.agent))
        return recipe.refs.get("resources_server")

    def model_name(self, agent: str | None = None) -> str | None:
        recipe = next(r for r in self.recipes if r.name == (agent or self.agent))
        return recipe.refs.get("model_server")

    def check(self, rows: list[dict[str, Any]]):
        """The rows' declared tools against the environment's routes, checked in one cell."""
        import ray

        from gymlab.resources.simple import SimpleResourcesServer
        from gymlab.resources.tools import CheckReport

        env = self.env_name()
        recipe = next((r for r in self.recipes if r.name == env), None)
        if recipe is None or not issubclass(recipe.server, SimpleResourcesServer):
            return CheckReport(env or self.name, [])
        return ray.get(self.pick().actor.check.remote(env, rows))

    @property
    def nodes(self) -> list[str]:
        """Ids of the nodes the live cells run on, each once."""
        return sorted({c.node_id for c in self.live})

    def close(self) -> None:
        """Stop every cell's servers and kill its actor (the Lab does this when it closes)."""
        if self._closed:
            return
        self._closed = True
        import ray

        from gymlab.cluster.bridge import unbridge

        unbridge(self)

        if not ray.is_initialized():
            return
        for cell in self.cells:
            try:
                ray.kill(cell.actor)
            except Exception:
                pass
            cell.alive = False

    def __enter__(self) -> CellPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        if self._closed:
            return f"<CellPool {self.name}: closed>"
        in_flight = sum(c.in_flight for c in self.cells)
        dead = len(self.cells) - len(self.live)
        head = (
            f"<CellPool {self.name}: {len(self.live)} cells on {len(self.nodes)} nodes, {in_flight} in flight"
            + (f", {dead} dead" if dead else "")
        )
        return head + "".join(f"\n  {c!r}" for c in self.cells) + ">"

