"""``gymlab serve CONFIG...``: every server of a config as its own process (or, with ``--ray``, in Ray
cells behind one door per agent), started in reference order, each port fixed before anything starts.
Ctrl-C, SIGTERM, any server's exit or this process's death stops them all."""

from __future__ import annotations

import argparse
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

from gymlab.errors import ConfigError, GymlabError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("configs", nargs="+", metavar="CONFIG", help="YAML files, merged in order")
    parser.add_argument("--dry-run", action="store_true", help="check the config and print the plan; start nothing")
    parser.add_argument(
        "--startup-timeout",
        type=float,
        default=60.0,
        metavar="S",
        help="seconds each server has to answer /health (default 60)",
    )
    parser.add_argument("--host", default="127.0.0.1", help="with --ray: the interface the agents' doors bind")
    parser.add_argument("--port", type=int, default=0, help="with --ray: the first agent's door port (0: free)")
    from gymlab.cli.collect import add_ray_arguments

    add_ray_arguments(parser)


@dataclass
class Planned:
    spec: Any
    url: str
    config: dict


def plan(config) -> list[Planned]:
    """Each server in launch order, its port fixed, its references as URLs and its ``num_workers`` checked."""
    from gymlab._runtime.serve import free_port
    from gymlab._runtime.workers import check_workers

    planned: list[Planned] = []
    urls: dict[str, str] = {}
    for spec in config.launch_order():
        spec.check_fields()
        workers = int(spec.fields.get("num_workers", 1) or 1)
        if workers > 1 and (reason := check_workers(spec.server_cls(), workers)):
            raise ConfigError(f"{spec.where}.num_workers: {reason}")
        port = spec.port or free_port(spec.host)
        host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(spec.host, spec.host)  # reachable, not a wildcard
        url = urls[spec.instance] = f"http://{f'[{host}]' if ':' in host else host}:{port}"
        planned.append(Planned(spec, url, spec.launch_config(urls, host=spec.host, port=port)))
    return planned


def main(args: argparse.Namespace) -> int:
    from gymlab.collection.config import load_config

    config = load_config(*args.configs)
    if args.dry_run:
        planned = plan(config)
        for p in planned:
            url = p.url + ("" if p.spec.port else " (a free port)")
            print(f"{p.spec.instance:<28} {p.spec.server_type:<22} {url:<37} {p.spec.target()}")
        print(f"gymlab serve: {len(planned)} servers; config OK (dry run, nothing started)")
        return 0
    try:
        return serve_ray(config, args) if args.ray else serve_processes(plan(config), args)
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM
        print("gymlab serve: stopping", file=sys.stderr, flush=True)
        return 0


def serve_processes(planned: list[Planned], args: argparse.Namespace) -> int:
    """Each planned server as its own process, until one exits or Ctrl-C."""
    from gymlab.collection.serve_one import spawn, stop, wait_healthy

    signal.signal(signal.SIGTERM, signal.default_int_handler)  # as Ctrl-C
    procs: list[tuple[Planned, Any]] = []
    try:
        for p in planned:
            procs.append((p, spawn(p.config, p.spec.target(), p.spec.where)))
        for p, proc in procs:
            if why := wait_healthy(proc, p.url, args.startup_timeout):
                raise GymlabError(f"{p.spec.where}: server {p.spec.instance} {why} (its output is above)")
            print(f"{p.spec.instance} -> {p.url}", flush=True)
        print(f"gymlab serve: all {len(procs)} servers are up; Ctrl-C stops them", flush=True)
        while True:
            for p, proc in procs:
                if proc.poll() is not None:
                    raise GymlabError(
                        f"server {p.spec.instance} ({p.url}) exited with code {proc.returncode}; stopping the others"
                    )
            time.sleep(0.2)
    finally:
        stop([proc for _, proc in procs])


def serve_ray(config, args: argparse.Namespace) -> int:
    """The config's servers in Ray cells, each agent behind one door on this host, until Ctrl-C."""
    from gymlab.cli.collect import ray_options
    from gymlab.cluster.front import serve_fronts
    from gymlab.cluster.pool import config_pool

    with config_pool(config, **ray_options(args)) as pool:
        signal.signal(signal.SIGTERM, signal.default_int_handler)  # after ray.init, which installs its own
        fronts = serve_fronts(pool, args.host, args.port)
        try:
            for agent, runner in fronts.items():
                cells = f"{len(pool.cells)} cell" + "s" * (len(pool.cells) != 1)
                print(f"{agent} -> {runner.url} (POST /run through {cells})", flush=True)
            print(f"gymlab serve: {pool!r}", flush=True)
            print("gymlab serve: all cells are up; Ctrl-C stops them", flush=True)
            while pool.live:
                time.sleep(0.5)
            raise GymlabError(f"{pool.name}: every cell is gone; stopping")
        finally:
            for runner in fronts.values():
                runner.stop()
