"""``collect(config, output, ...)``: a config's servers served for one collection, every row collected.

The function behind ``gymlab collect``; the collection itself is ``gymlab.collection.collect`` (the
run engine's JSONL sink), and Ctrl-C stops it and the servers with it.
"""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gymlab.collection.runner import CollectResult, Target
from gymlab.collection.runner import collect as collect_rows
from gymlab.errors import ConfigError

YAML_SUFFIXES = (".yaml", ".yml")


def collect(
    source: Any,
    output: str | os.PathLike,
    *,
    input: str | os.PathLike | Iterable[dict[str, Any]] | None = None,
    dataset: str | None = None,
    split: str | None = None,
    agent: str | None = None,
    agent_url: str | list[str] | None = None,
    resources_url: str | None = None,
    ray: bool = False,
    ray_options: dict[str, Any] | None = None,
    **options: Any,
) -> CollectResult:
    """Collect the rollouts of a config's rows (or of ``source`` rows) into ``output``.

    ``source``: a config (``load_config(...)``, YAML paths), whose servers run in this process (a
    ``Lab``), in Ray cells (``ray=True``) or at ``agent_url``; or rows (dicts, a JSONL path) for
    servers at ``agent_url``. Rows (``input``, or the config's ``dataset``/``split``) go to the agent
    their ``agent_ref`` names (or ``agent``), a taskset row to its environment server. Errors speak the
    CLI's names. ``options``: ``gymlab.collection.collect``'s; ``ray_options``: ``config_pool``'s.
    """
    config = _config_of(source)
    if ray and (agent_url or config is None):
        raise ConfigError("--ray runs a CONFIG's servers in Ray cells: give the CONFIG, and no --agent-url")
    if config is None:
        if source is None or not (agent_url or options.get("route")):
            raise ConfigError("give --agent-url and --input, or a CONFIG whose servers to run")
        return collect_rows(
            source, output, agent_url=agent_url, agent_name=agent, resources_url=resources_url, **options
        )

    from gymlab.collection.config_rows import config_rows

    rows: Any = input if input is not None else config_rows(config, dataset=dataset, split=split)
    if agent_url:
        return collect_rows(rows, output, agent_url=agent_url, agent_name=agent, resources_url=resources_url, **options)
    if ray:
        from gymlab._http.client import Client
        from gymlab._sync import run_sync
        from gymlab.cluster.bridge import bridged_urls
        from gymlab.cluster.configs import config_pool

        with config_pool(config, **(ray_options or {})) as pool:
            print(f"gymlab collect: {pool!r}", file=sys.stderr, flush=True)
            client = Client()  # reaches the bridged URLs: one cell answers /aggregate_metrics
            urls = bridged_urls(pool, pool.pick(), client.registry)
            try:
                route = config_route(config, urls, agent, pool.replicas)
                return collect_rows(rows, output, route=route, client=client, **options)
            finally:
                run_sync(client.close())

    from gymlab.lab import Lab
    from gymlab.resources.simple import default_metrics

    with Lab() as lab:
        urls: dict[str, str] = {}
        here: set[str] = set()  # servers whose metrics are the default: tallied here, not asked for
        for spec in config.launch_order():
            # In-process servers are threads of this process: one worker each, on a free port.
            server = spec.build(urls, host="127.0.0.1", port=0, num_workers=1)
            urls[spec.instance] = lab.serve(server).url
            if default_metrics(server):
                here.add(spec.instance)
        book, start = lab._book, time.time()
        try:
            with book.quiet():  # one summary line below, not one line per failed episode
                route = config_route(config, urls, agent, metrics_here=here)
                return collect_rows(rows, output, route=route, client=lab.client, **options)
        finally:
            if line := _errors_line([entry for entry in list(book.entries) if entry.time >= start]):
                print(line, file=sys.stderr, flush=True)


def _errors_line(entries: list) -> str | None:
    """One line for the errors the servers logged during a collection: how many, and the most common."""
    if not entries:
        return None
    (common, n), *_ = Counter(entry.line for entry in entries).most_common(1)
    return f"gymlab collect: the servers logged {len(entries)} errors; the most common ({n}): {common[:300]}"


def _config_of(source: Any):
    """``source`` as a loaded config, or None when it is rows."""
    from gymlab.collection.config import Config, load_config

    if isinstance(source, Config):
        return source
    paths = [source] if isinstance(source, (str, os.PathLike)) else source if isinstance(source, (list, tuple)) else ()
    if paths and all(isinstance(s, (str, os.PathLike)) and Path(s).suffix in YAML_SUFFIXES for s in paths):
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
    return name


def config_route(config, urls: dict[str, str], agent: str | None, replicas=None, metrics_here: Iterable[str] = ()):
    """row -> Target for a served config: taskset rows to their environment server, others to an agent.

    ``replicas`` (name -> ``ReplicaPool``): the servers run as replicas (Ray cells); ``urls`` then
    only name them (and reach one cell's resources server for its metrics). ``metrics_here``: resources
    servers whose metrics are tallied by the collection as it reads its records (a server in this
    process with the default metrics: the same result without a request holding every record)."""
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


__all__ = ["collect", "config_route"]
