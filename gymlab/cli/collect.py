"""``gymlab collect``: rollouts of a dataset, resumable (rerun the same command to continue); exit status 1
when some rollouts failed (a rerun retries them), 2 when the run stopped: its first tries all failed alike."""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from typing import Any

from gymlab._http.retry import RETRY_SPAN_S
from gymlab.collection.runner import DEFAULT_ROLLOUT_TIMEOUT_S
from gymlab.errors import ConfigError
from gymlab.run.engine import STOP_AFTER


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
        "--retry-span",
        type=float,
        default=RETRY_SPAN_S,
        metavar="SECONDS",
        help=f"retry a transport or provider failure on, past --max-retries, while its failures span under this (default {RETRY_SPAN_S:g})",
    )
    parser.add_argument(
        "--stop-after",
        type=int,
        default=STOP_AFTER,
        metavar="N",
        help=f"stop the run when its first N tries all fail alike, such as a silent model (default {STOP_AFTER}; 0: never)",
    )
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
    runtime_env = _json_object("--runtime-env", args.runtime_env)
    return dict(
        address=args.address, replicas=args.replicas, cpus_per_replica=args.cpus_per_replica, runtime_env=runtime_env
    )


def _json_object(flag: str, text: str | None) -> dict | None:
    if not text:
        return None
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"{flag}: not JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ConfigError(f"{flag}: expected a JSON object")
    return value


def main(args: argparse.Namespace) -> int:
    from gymlab.cluster.pool import config_pool
    from gymlab.collection.config import load_config
    from gymlab.collection.runner import collect

    if args.ray and (args.agent_url or not args.configs):
        raise ConfigError("--ray runs a CONFIG's servers in Ray cells: give the CONFIG, and no --agent-url")
    if not args.configs and not (args.input and args.agent_url):
        raise ConfigError("give --agent-url and --input, or a CONFIG whose servers to run")
    source: Any = load_config(*args.configs) if args.configs else args.input
    with config_pool(source, **ray_options(args)) if args.ray else contextlib.nullcontext() as pool:
        if pool is not None:
            print(f"gymlab collect: {pool!r}", file=sys.stderr, flush=True)
        same = ("dataset", "split", "agent", "agent_url", "resources_url", "repeats", "concurrency", "limit")  # flags
        result = collect(
            source,
            args.output,
            input=args.input if args.configs else None,
            pool=pool,
            retry_span_s=args.retry_span,
            timeout_s=args.timeout,
            responses_create_params=_json_object("--responses-create-params", args.responses_create_params),
            progress=not args.no_progress,
            **{k: getattr(args, k) for k in (*same, "max_retries", "stop_after", "num_repeats_add_seed", "shard")},
        )
    print(
        f"gymlab collect: {result.n_rollouts} rollouts in {result.output} ({result.n_new} new, "
        f"{result.n_skipped} already done), mean reward {result.mean_reward:.3f}"
    )
    if result.n_failures:
        print(
            f"gymlab collect: {result.n_failures} rollouts failed; see {result.paths['failures']} "
            "(rerun the same command to retry them)",
            file=sys.stderr,
        )
        return 1
    return 0
