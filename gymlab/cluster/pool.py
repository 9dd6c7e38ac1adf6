"""The driver's side of the cells: ``CellPool`` starts them, sends each rollout to the cell with the
fewest in flight, and retries it on another cell when its cell dies; the driver alone records it.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import sys
from dataclasses import dataclass, field
from html import escape
from typing import TYPE_CHECKING, Any

from gymlab._http.client import Reply, parsed, transport_error
from gymlab._sync import on_background_loop, run_sync
from gymlab.cluster.bridge import bridged_urls
from gymlab.cluster.cell import Cell, CellGone
from gymlab.cluster.recipe import Recipe, from_config, pack
from gymlab.errors import ConfigError, GymlabError, ReplicaGone, ServerError, ServerStartError
from gymlab.jsonl import dumps
from gymlab.protocol import Rollout
from gymlab.protocol.failure_kinds import Failure
from gymlab.run.engine import Job, Policy, attempt
from gymlab.run.pool import ReplicaPool

if TYPE_CHECKING:
    from gymlab._http.inproc import Registry

_pool_ids = itertools.count()
_JSON = {"Content-Type": "application/json"}

#: Seconds a cell may take to check a run's rows against its environment's routes.
CHECK_TIMEOUT_S = 30.0
#: Seconds the cells of a pool may take to start.
STARTUP_TIMEOUT_S = 120.0

#: Ray's switch for clusters of several machines on Windows and macOS, read once at import; off
#: ("0"), the address of a node this process starts is 127.0.0.1 (Linux reads the same switch).
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def require_ray(local: bool = False):
    """The ``ray`` module, or a ``ConfigError`` saying how to install it. ``local``: the process will start a
    local cluster, so a first import makes that cluster's address loopback (docs/cluster.md)."""
    first = "ray" not in sys.modules
    saved = os.environ.get(LOOPBACK_ENV)
    if local and first and saved is None:
        os.environ[LOOPBACK_ENV] = "0"
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "Ray is not installed: pip install 'gymlab[ray]' (plain ray is enough; no dashboard needed)"
        ) from None
    finally:
        if saved is None:
            os.environ.pop(LOOPBACK_ENV, None)  # read once at import; processes started later join as usual
    return ray


def connect(address: str | None = None, runtime_env: dict[str, Any] | None = None, **init_options: Any):
    """The ``ray`` module, connected: the running connection, else ``ray.init`` of a local cluster (``address=None``:
    no dashboard, loopback), this host's (``"auto"``) or ``"HOST:PORT"``'s, with the job's ``runtime_env``."""
    ray = require_ray(local=address is None)
    if ray.is_initialized():
        return ray
    options: dict[str, Any] = {"include_dashboard": False} if address is None else {}
    if runtime_env:
        options["runtime_env"] = runtime_env
    options.update(init_options)
    try:
        ray.init(address=address, **options)
    except ConnectionError as exc:
        raise ConfigError(
            f"cannot join the Ray cluster at {address!r}: {exc}; start it with `ray start --head` "
            "or give its address (HOST:PORT)"
        ) from None
    return ray


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

    async def call(self, method: str, *args: Any, budget: float | None = None) -> Any:
        """Await one actor method for at most ``budget`` seconds on the driver's clock (then it is cancelled in
        the cell and ``TimeoutError`` raised); a dead actor raises ``CellGone``, the method's error itself."""
        import ray
        from ray.exceptions import RayActorError, RayTaskError

        ref = getattr(self.actor, method).remote(*args)
        try:
            async with asyncio.timeout(budget):
                return await ref
        except RayTaskError as exc:
            raise exc.cause from None
        except RayActorError as exc:
            self.alive = False
            cause = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise CellGone(f"cell {self.index} on node {self.node_ip or '?'} is gone: {cause}") from None
        except (TimeoutError, asyncio.CancelledError):
            with contextlib.suppress(Exception):  # sends the cancel and returns: a frozen cell gets it when it wakes
                ray.cancel(ref)
            raise

    def __repr__(self) -> str:
        state = f"{self.in_flight} in flight, {self.done} done{'' if self.alive else ' dead'}"
        return f"<cell {self.index} node {self.node_ip} ({self.node_id[:6]}) {state}>"


class CellReplica:
    """``agent`` in ``cell`` as a run replica (``gymlab.run.pool.Replica``): ``run`` is its ``POST /run``."""

    def __init__(self, cell: CellRef, agent: str):
        self.cell, self.agent = cell, agent
        self.name = f"{agent}@cell{cell.index}"

    async def run(self, job: dict[str, Any], timeout_s: float | None) -> Any:
        """The ``/run`` answer within ``timeout_s``; ``ReplicaGone`` when the cell died, ``ServerError``
        when the rollout failed (a ``transport_timeout`` one when the cell did not answer in time)."""
        cell, body = self.cell, dumps(job)  # orjson, big ints by the standard library
        inner = None if timeout_s is None else timeout_s - min(1.0, timeout_s / 10)  # the cell's /run: a bit less
        cell.in_flight += 1
        try:
            status, _, body = await cell.call("request", self.agent, "/run", body, _JSON, inner, budget=timeout_s)
        except CellGone as exc:
            failure = Failure(kind="transport_peer_drop", server=self.name, message=str(exc))
            raise ReplicaGone(self.name, str(exc), failure) from None
        except TimeoutError as exc:
            where = f"cell {cell.index} on node {cell.node_ip or '?'}"
            raise transport_error(self.name, where, "/run", exc, timeout_s) from None
        except (GymlabError, OSError):
            raise
        except Exception as exc:  # the cell's own code failed (not the rollout's servers): still one record
            cause = f"cell {cell.index} raised {type(exc).__name__}: {exc}"
            failure = Failure(kind="agent_run_error", server=self.name, message=cause)
            raise ServerError(self.name, "POST /run", 500, cause, failure=failure) from None
        finally:
            cell.in_flight -= 1
        cell.done += 1
        return parsed(Reply(status, body), "/run", self.agent)

    async def alive(self) -> bool:
        """A dead actor does not come back (cells are not restarted)."""
        return self.cell.alive

    def __repr__(self) -> str:
        return f"<CellReplica {self.name}>"


class CellPool:
    """Replicas of a set of servers on a Ray cluster, one actor ("cell") per replica. ``run_many`` and
    ``lab.episode`` take a pool as they take an agent handle; ``close()`` kills the actors."""

    def __init__(
        self,
        recipes: list[Recipe],
        *,
        replicas: int = 1,
        cpus_per_replica: float = 1.0,
        name: str | None = None,
        address: str | None = None,
        runtime_env: dict[str, Any] | None = None,
        log_level: str = "warning",
    ):
        if replicas < 1:
            raise ConfigError(f"replicas must be at least 1, got {replicas}")
        agents = [r.name for r in recipes if r.role == "agent"]
        if not agents:
            raise ConfigError("a cell needs an agent (or environment) server to answer /run; none was given")
        ray = require_ray(local=address is None)  # a first import binds a local cluster to loopback
        job_level = not ray.is_initialized()  # then runtime_env is the job's (a local folder uploads)
        ray = connect(address, runtime_env)
        self.recipes = recipes
        self.agents = agents
        self.agent = agents[0]
        self.name = name or self.agent
        self.id = next(_pool_ids)
        self.cpus_per_replica = cpus_per_replica
        self._closed = False
        self._replicas: dict[str, Any] = {}  # agent -> its ReplicaPool over the cells (the dispatch seam)
        self._bridges: dict[tuple[Any, int], dict[str, Any]] = {}  # (registry, cell) -> server -> its bridge
        options: dict[str, Any] = {"num_cpus": cpus_per_replica, "scheduling_strategy": "SPREAD"}
        if runtime_env and not job_level:
            options["runtime_env"] = runtime_env  # per cell: env_vars, pip, URIs (not a local folder)
        files, blob = pack(recipes, (runtime_env or {}).get("working_dir"))
        try:
            remote = ray.remote(Cell).options(**options)
            self.cells = [CellRef(i, remote.remote(files, blob, i, log_level)) for i in range(replicas)]
        except ValueError as exc:  # Ray's check of runtime_env (a local folder once Ray is connected)
            raise ConfigError(
                f"{self.name}: runtime_env: {exc} (give a local working_dir to the first serve_pool of the "
                "process, or to ray.init(runtime_env=...))"
            ) from None
        self._start(ray)

    def _start(self, ray) -> None:
        refs = {cell.actor.info.remote(): cell for cell in self.cells}
        ready, pending = ray.wait(list(refs), num_returns=len(refs), timeout=STARTUP_TIMEOUT_S)
        try:
            if pending:
                raise ServerStartError(
                    f"{self.name}: {len(pending)} of {len(self.cells)} cells did not start within {STARTUP_TIMEOUT_S:.0f}s; "
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

    @property
    def live(self) -> list[CellRef]:
        return [c for c in self.cells if c.alive]

    def pick(self) -> CellRef:
        """The live cell with the fewest rollouts in flight (where an episode is pinned), else ``CellGone``."""
        live = self.live
        if not live:
            raise CellGone(f"{self.name}: no live cell left of {len(self.cells)}")
        return min(live, key=lambda c: (c.in_flight, c.done, c.index))

    def replicas(self, agent: str | None = None):
        """The cells as one ``ReplicaPool`` of ``agent`` (default: the pool's agent), kept per agent."""
        agent = agent or self.agent
        if agent not in self._replicas:
            self._replicas[agent] = ReplicaPool([CellReplica(c, agent) for c in self.cells], reprobe_s=None)
        return self._replicas[agent]

    def urls(self, registry: Registry) -> dict[str, str]:
        """Driver-side URLs of one live cell's servers, in-process through ``registry``: a collection's targets."""
        return bridged_urls(self, self.pick(), registry)

    async def apost_run(self, job: dict[str, Any], *, agent: str | None = None, timeout: float | None = None) -> Any:
        """``POST /run`` of ``job`` on the run engine: in the least busy live cell, moved while cells die; the
        answer, or a ``ServerError`` (status 0 and ``transport_peer_drop`` when no cell is left). The driver
        keeps ``timeout``; a failed rollout is not tried again."""
        timeout = self.rollout_budget(agent) if timeout is None else timeout
        policy = Policy(max_retries=0, timeout_s=timeout, stop_after=None, retry_span_s=0.0)
        outcome = await attempt(Job(0, job, self.replicas(agent), agent or self.agent), policy)
        if outcome.record is not None:
            return outcome.answer if outcome.answer is not None else outcome.record
        if isinstance(outcome.error, ServerError):
            raise outcome.error
        cause = getattr(outcome.error, "cause", str(outcome.error))
        raise ServerError(
            self.name, "POST /run", 0, cause, "every cell of the pool is gone; serve it again", outcome.failure
        )

    async def arun(self, row: dict[str, Any]):
        """One episode of ``row`` through the pool's agent: a ``Rollout`` (what ``run_many`` calls)."""
        return Rollout.model_validate(await on_background_loop(self.apost_run(row)))

    def run(self, row: dict[str, Any]):
        """``arun`` from sync code."""
        __tracebackhide__ = True
        return run_sync(self.arun(row))

    def recipe(self, agent: str | None = None) -> Recipe:
        """The recipe of ``agent`` (default: the pool's agent)."""
        return next(r for r in self.recipes if r.name == (agent or self.agent))

    def env_name(self, agent: str | None = None) -> str | None:
        """The name of the resources server ``agent`` is bound to in each cell."""
        return self.recipe(agent).refs.get("resources_server")

    def rollout_budget(self, agent: str | None = None) -> float:
        """Seconds the driver waits for one rollout of ``agent`` when none is given: the agent's own bounds
        on a whole episode and on its cleanup (so its typed ``agent_timeout`` comes first), plus one."""
        from gymlab.agents.base import Timeouts

        given, default = self.recipe(agent).config.get("timeouts") or {}, Timeouts()
        try:
            bounds = given if isinstance(given, Timeouts) else Timeouts.model_validate(given)
        except ValueError:  # an environment server's own timeouts field: the agent defaults
            bounds = default
        return (bounds.episode or default.episode or 0.0) + (bounds.cleanup or default.cleanup or 0.0) + 1.0

    def check(self, rows: list[dict[str, Any]]):
        """The rows' declared tools against the environment's routes, checked in one cell."""
        import ray

        from gymlab.resources.simple import SimpleResourcesServer
        from gymlab.resources.tools import CheckReport

        env = self.env_name()
        recipe = next((r for r in self.recipes if r.name == env), None)
        if recipe is None or not issubclass(recipe.server, SimpleResourcesServer):
            return CheckReport(env or self.name, [])
        for cell in self.live:
            try:
                return ray.get(cell.actor.check.remote(env, rows), timeout=CHECK_TIMEOUT_S)
            except ray.exceptions.RayActorError:
                cell.alive = False
            except ray.exceptions.GetTimeoutError:
                continue  # a frozen cell: ask the next one
        return CheckReport(env or self.name, [])  # no live cell: the run's rollouts fail with a typed failure instead

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

        for (registry, _), entries in self._bridges.items():
            for entry in entries.values():
                registry.unregister(entry)
        self._bridges.clear()
        if not ray.is_initialized():
            return
        live = [c.actor.close.remote() for c in self.cells if c.alive]
        ray.wait(live, num_returns=len(live), timeout=15)  # their server processes stop cleanly first
        for cell in self.cells:
            with contextlib.suppress(Exception):
                ray.kill(cell.actor)
            cell.alive = False

    def __enter__(self) -> CellPool:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _repr_html_(self) -> str:
        """A notebook's view: one row per cell with its node and load."""
        rows = "".join(
            f"<tr><td>{c.index}</td><td>{escape(c.node_ip)}</td><td><code>{escape(c.node_id[:12])}</code></td>"
            f"<td>{c.in_flight}</td><td>{c.done}</td><td>{'live' if c.alive else 'dead'}</td></tr>"
            for c in self.cells
        )
        head = "".join(f"<th>{h}</th>" for h in ("cell", "node", "node id", "in flight", "done", "state"))
        title = escape(repr(self).splitlines()[0].strip("<>"))
        return f"<div><b>{title}</b><table><tr>{head}</tr>{rows}</table></div>"

    def __repr__(self) -> str:
        if self._closed:
            return f"<CellPool {self.name}: closed>"
        in_flight = sum(c.in_flight for c in self.cells)
        dead = f", {len(self.cells) - len(self.live)} dead" if len(self.live) < len(self.cells) else ""
        head = f"<CellPool {self.name}: {len(self.live)} cells on {len(self.nodes)} nodes, {in_flight} in flight{dead}"
        return head + "".join(f"\n  {c!r}" for c in self.cells) + ">"


def replicas_of(config, replicas: int | None) -> int:
    """``replicas`` if given, else the largest ``num_replicas`` in the config, else one cell per live node."""
    if replicas is not None:
        return replicas
    declared = [s.num_replicas for s in config.servers.values() if s.num_replicas]
    return max(declared) if declared else sum(1 for n in require_ray().nodes() if n.get("Alive"))


def config_pool(
    config,
    *,
    address: str | None = None,
    replicas: int | None = None,
    cpus_per_replica: float = 1.0,
    runtime_env: dict[str, Any] | None = None,
) -> CellPool:
    """Cells each running every server of a YAML ``config`` (``gymlab collect/serve CONFIG --ray``)."""
    connect(address)
    recipes = from_config(config)
    return CellPool(
        recipes,
        replicas=replicas_of(config, replicas),
        cpus_per_replica=cpus_per_replica,
        name=", ".join(r.name for r in recipes if r.role == "agent"),
        address=address,
        runtime_env=runtime_env,
    )
