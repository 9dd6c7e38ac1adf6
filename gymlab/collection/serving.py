"""A config's servers served in this process for one collection (no ``Lab``), and where each row goes."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gymlab._traces import logbook
from gymlab.collection.config import Config, load_config
from gymlab.errors import ConfigError
from gymlab.run.pool import ReplicaPool

if TYPE_CHECKING:
    from gymlab._http.client import Client


@dataclass(frozen=True)
class Target:
    """Where one row goes: ``POST {url}/run`` (or ``replicas``), recorded as ``agent_ref``."""

    url: str
    agent_ref: dict[str, Any]
    metrics_url: str | None = None
    replicas: ReplicaPool | None = field(default=None, compare=False)


@contextlib.asynccontextmanager
async def served(config: Config, client: Client) -> AsyncIterator[tuple[dict[str, str], set[str]]]:
    """Every server of ``config`` on 127.0.0.1 in this process, reached through ``client``: (name -> URL,
    the resources servers whose default metrics the collection tallies itself); their errors summed up."""
    from gymlab._runtime.serve import LoopServer  # (here: reading a collection's files needs no server stack)
    from gymlab.resources.simple import default_metrics

    urls: dict[str, str] = {}
    here: set[str] = set()
    runners: list[tuple[Any, Any]] = []
    book, start = logbook(), time.time()
    try:
        for spec in config.launch_order():
            server = spec.build(urls, host="127.0.0.1", port=0, num_workers=1)
            if "error_traces" not in server.model_fields_set:
                server.error_traces = True  # a crash's trace travels to the failed record
            server.use_client(client)
            runner = LoopServer(server.app, "127.0.0.1", 0, server.name, registry=client.registry)
            await asyncio.to_thread(runner.start)  # its server runs on the loop this may run on
            runners.append((server, runner))
            urls[spec.instance] = runner.url
            if default_metrics(server):
                here.add(spec.instance)
        with book.quiet():  # one summary line below, not one line per failed episode
            yield urls, here
    finally:
        for server, _ in runners:
            server.stop_work()
        for _, runner in reversed(runners):
            await asyncio.to_thread(runner.stop)
        if lines := [entry.line for entry in list(book.entries) if entry.time >= start]:
            (common, n), *_ = Counter(lines).most_common(1)
            line = f"the servers logged {len(lines)} errors; the most common ({n}): {common[:300]}"
            print(f"gymlab collect: {line}", file=sys.stderr, flush=True)


def config_of(source: Any) -> Config | None:
    """``source`` as a loaded config (a ``Config``, or YAML paths), or None when it is rows."""
    if isinstance(source, Config):
        return source
    paths = [source] if isinstance(source, (str, os.PathLike)) else source if isinstance(source, (list, tuple)) else ()
    if paths and all(isinstance(s, (str, os.PathLike)) and Path(s).suffix in (".yaml", ".yml") for s in paths):
        return load_config(*paths)
    return None


def agent_of(row: dict[str, Any], agents: Any, agent: str | None, where: str = "row") -> str:
    """The agent that runs ``row``: ``agent`` (``--agent``), else the row's ``agent_ref``, else the only one."""
    name = agent or (row.get("agent_ref") or {}).get("name")
    if name is None and len(agents) == 1:
        name = next(iter(agents))
    if name not in agents:
        raise ConfigError(
            f"{where} names agent {name!r}, which the config does not define; agents: "
            f"{', '.join(agents) or 'none'} (use --agent to choose one)"
        )
    return str(name)


def config_route(
    config: Config,
    urls: dict[str, str],
    agent: str | None,
    replicas: Callable[[str], ReplicaPool] | None = None,
    metrics_here: Iterable[str] = (),
) -> Callable[[dict[str, Any]], Target]:
    """row -> ``Target`` for a served config: taskset rows to their environment server, others to an agent.
    ``replicas`` (name -> ``ReplicaPool``): the servers run as Ray cells (``urls`` then only name them);
    ``metrics_here``: resources servers whose metrics the collection tallies as it reads its records."""
    metrics_here = frozenset(metrics_here)
    agents = config.agents
    if agent is not None and agent not in agents:
        raise ConfigError(f"--agent {agent!r}: no such agent in the config; agents: {', '.join(agents) or 'none'}")

    def metrics_url(name: str) -> str | None:
        ref = config.servers[name].refs.get("resources_server")
        return urls.get(ref[1]) if ref and ref[1] not in metrics_here else None

    def route(row: dict[str, Any]) -> Target:
        if "task_input" in row and agent is None:
            taskset = str(row.get("task_id", "")).split("/", 1)[0]
            env = config.environment_server_routes.get(taskset)
            if env is None:
                raise ConfigError(
                    f"row {row.get('task_id')!r}: taskset {taskset!r} is not in environment_server_routes"
                )
            pool = replicas(env) if replicas is not None else None
            return Target(urls[env], {"type": "environment_servers", "name": env}, None, pool)
        name = agent_of(row, agents, agent)
        pool = replicas(name) if replicas is not None else None
        return Target(urls[name], {"type": "responses_api_agents", "name": name}, metrics_url(name), pool)

    return route
