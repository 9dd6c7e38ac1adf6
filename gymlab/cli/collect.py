"""``gymlab collect``: rollouts of a dataset, resumable (rerun the same command to continue).

Two ways to reach the servers:

- ``--agent-url URL --input rows.jsonl``: servers already running (``gymlab serve``); several
  ``--agent-url``s are replicas of one agent (``collection.dispatch``);
- ``CONFIG...``: the config's servers start in threads of this process for the run. Rows come from
  ``--input`` or the config's datasets (``--dataset``/``--split`` pick some); each row goes to the
  agent its ``agent_ref`` names (or ``--agent``), a taskset row to its environment server.

``--shard I/N`` collects one shard of the tasks (``collection.shards``); ``gymlab merge`` joins them.

``CONFIG... --ray``: the config's servers run in Ray cells instead (``gymlab.cluster``), on a local
cluster or the one ``--address`` names; each rollout goes to the cell with the fewest in flight, and
this process stays the only writer of the output.

Exit status 1 when some rollouts still failed after their retries (they are in NAME_failures.jsonl).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from gymlab.collection.runner import DEFAULT_ROLLOUT_TIMEOUT_S  # noqa: E402
from gymlab.errors import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("configs", nargs="*", metavar="CONFIG", help="YAML files whose servers to run")
    parser.add_argument("-o", "--output", required=True, help="NAME.jsonl; companion files go next to it")
    parser.add_argument("-i", "--input", help="rows JSONL (default: the config's datasets)")
    parser.add_argument(
        "--agent-url",
        action="append",
        help="an agent server already running (POST /run); repeat it for replicas of the same agent on "
        "several hosts: each rollout goes to the least busy, and a replica that goes away hands its "
        "rollouts to the others",
    )
    parser.add_argument(
        "--shard",
        metavar="I/N",
        help="collect only shard I of N (tasks whose index mod N is I-1, every repeat of a task in one "
        "shard), into its own output; join the shards with 'gymlab merge'",
    )
    parser.add_argument("--resources-url", help="with --agent-url: the resources server for /aggregate_metrics")
    parser.add_argument("--agent", help="send every row to this agent (default: each row's agent_ref)")
    parser.add_argument("--dataset", help="only this config dataset (by name)")
    parser.add_argument("--split", help="only the config datasets of this type (example, train, benchmark...)")
    parser.add_argument("-n", "--repeats", type=int, default=1, help="rollouts per row (default 1)")
    parser.add_argument("-c", "--concurrency", type=int, default=16, help="rollouts at once (default 16)")
    parser.add_argument("--limit", type=int, help="only the first N rows")
    parser.add_argument("--max-retries", type=int, default=2, help="retries of a failed rollout (default 2)")
    parser.add_argument(
        "--timeout",
        type=float,
        default=DEFAULT_ROLLOUT_TIMEOUT_S,
        help=f"seconds one POST /run may take (default {DEFAULT_ROLLOUT_TIMEOUT_S:g})",
    )
    parser.add_argument(
        "--responses-create-params",
        metavar="JSON",
        help="run-level overrides merged into each flat row's request, e.g. '{\"temperature\": 0}'",
    )
    parser.add_argument("--num-repeats-add-seed", action="store_true", help="give repeat r the seed r (flat rows only)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_ray_arguments(parser)


def add_ray_arguments(parser: argparse.ArgumentParser) -> None:
    """``--ray`` and its options (shared by ``gymlab serve``)."""
    group = parser.add_argument_group("Ray (the ray extra)")
    group.add_argument("--ray", action="store_true", help="run the config's servers in Ray cells (replicas)")
    group.add_argument("--address", help="with --ray: join this cluster (HOST:PORT or 'auto'); default: a local one")
    group.add_argument(
        "--replicas", type=int, help="with --ray: cells (default: the config's num_replicas, else one per node)"
    )
    group.add_argument("--cpus-per-replica", type=float, default=1.0, help="with --ray: CPUs a cell reserves (1)")
    group.add_argument(
        "--runtime-env",
        metavar="JSON",
        help='with --ray: Ray\'s runtime_env for the cells, e.g. \'{"working_dir": "."}\'',
    )


def ray_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ``config_pool`` keywords of ``--ray``'s options."""
    runtime_env = None
    if args.runtime_env:
        try:
            runtime_env = json.loads(args.runtime_env)
        except ValueError as exc:
            raise ConfigError(f"--runtime-env: not JSON: {exc}") from None
    return dict(
        address=args.address, replicas=args.replicas, cpus_per_replica=args.cpus_per_replica, runtime_env=runtime_env
    )


def _overrides(text: str | None) -> dict | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"--responses-create-params: not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ConfigError("--responses-create-params: expected a JSON object")
    return value


def config_route(config, urls: dict[str, str], agent: str | None, replicas=None):
    """row -> Target for a served config: taskset rows to their environment server, others to an agent.

    ``replicas`` (name -> ``ReplicaPool``): the servers run as replicas (Ray cells); ``urls`` then
    only name them (and reach one cell's resources server for its metrics)."""
    from gymlab.collection.runner import Target

    agents = config.agents
    if agent is not None and agent not in agents:
        raise ConfigError(f"--agent {agent!r}: no such agent in the config; agents: {', '.join(agents) or 'none'}")

    def metrics_url(name: str) -> str | None:
        ref = config.servers[name].refs.get("resources_server")
        return urls.get(ref[1]) if ref else None

    def pool_of(name: str):
        return replicas(name) if replicas is not None else None

    def route(row: dict[str, Any]) -> Target:
        if "task_input" in row and agent is None:
            taskset = str(row.get("task_id", "")).split("/", 1)[0]
            env = config.environment_server_routes.get(taskset)
            if env is None:
                raise ConfigError(
                    f"row {row.get('task_id')!r}: taskset {taskset!r} is not in environment_server_routes"
                )
            return Target(urls[env], {"type": "environment_servers", "name": env}, None, pool_of(env))
        name = agent or (row.get("agent_ref") or {}).get("name")
        if name is None and len(agents) == 1:
            name = next(iter(agents))
        if name not in agents:
            raise ConfigError(
                f"row names agent {name!r}, which the config does not define; agents: "
                f"{', '.join(agents) or 'none'} (use --agent to choose one)"
            )
        return Target(urls[name], {"type": "responses_api_agents", "name": name}, metrics_url(name), pool_of(name))

    return route


def main(args: argparse.Namespace) -> int:
    from gymlab.collection.runner import collect

    options = dict(
        repeats=args.repeats,
        concurrency=args.concurrency,
        max_retries=args.max_retries,
        timeout_s=args.timeout,
        responses_create_params=_overrides(args.responses_create_params),
        num_repeats_add_seed=args.num_repeats_add_seed,
        limit=args.limit,
        shard=args.shard,
        progress=not args.no_progress,
    )
    if args.ray and (args.agent_url or not args.configs):
        raise ConfigError("--ray runs a CONFIG's servers in Ray cells: give the CONFIG, and no --agent-url")
    if not args.configs:
        if not args.agent_url or not args.input:
            raise ConfigError("give --agent-url and --input, or a CONFIG whose servers to run")
        result = collect(
            args.input,
            args.output,
            agent_url=args.agent_url,
            agent_name=args.agent,
            resources_url=args.resources_url,
            **options,
        )
        return _report(result)

    from gymlab.collection.config import load_config
    from gymlab.collection.config_rows import config_rows

    config = load_config(*args.configs)
    rows: Any = args.input or config_rows(config, dataset=args.dataset, split=args.split)
    if args.agent_url:
        result = collect(
            rows,
            args.output,
            agent_url=args.agent_url,
            agent_name=args.agent,
            resources_url=args.resources_url,
            **options,
        )
        return _report(result)

    if args.ray:
        from gymlab.cluster.bridge import bridged_urls
        from gymlab.cluster.configs import config_pool

        with config_pool(config, **ray_options(args)) as pool:
            print(f"gymlab collect: {pool!r}", file=sys.stderr, flush=True)
            urls = bridged_urls(pool, pool.pick())  # names the targets; one cell answers /aggregate_metrics
            route = config_route(config, urls, args.agent, pool.replicas)
            result = collect(rows, args.output, route=route, **options)
        return _report(result)

    from gymlab.lab import Lab

    with Lab() as lab:
        urls: dict[str, str] = {}
        for spec in config.launch_order():
            # In-process servers are threads of this process: one worker each, on a free port.
            urls[spec.instance] = lab.serve(spec.build(urls, host="127.0.0.1", port=0, num_workers=1)).url
        result = collect(rows, args.output, route=config_route(config, urls, args.agent), **options)
    return _report(result)


def _report(result) -> int:
    print(
        f"gymlab collect: {len(result.rollouts)} rollouts in {result.output} ({result.n_new} new, "
        f"{result.n_skipped} already done), mean reward {result.mean_reward:.3f}"
    )
    if result.failures:
        print(
            f"gymlab collect: {len(result.failures)} rollouts failed after retries; see "
            f"{result.paths['failures']} (rerun the same command to retry them)",
            file=sys.stderr,
        )
        return 1
    return 0
