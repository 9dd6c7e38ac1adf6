"""``gymlab serve CONFIG...``: every server of a config as its own process (or, with ``--ray``, in Ray
cells behind one door per agent), started in reference order, each port fixed before anything starts.
Ctrl-C, SIGTERM, any server's exit or this process's death stops them all.
"""

from __future__ import annotations

import argparse
import signal
import subprocess
import sys
import time
from dataclasses import dataclass

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
    name: str
    server_type: str
    target: str
    where: str
    host: str
    port: int
    config: dict
    free: bool = False  # the port was chosen here (the config gives none)

    @property
    def url(self) -> str:
        host = {"0.0.0.0": "127.0.0.1", "::": "::1"}.get(self.host, self.host)  # reachable, not a wildcard
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}"


def plan(config) -> list[Planned]:
    """Each server in launch order with its port fixed and its references as URLs."""
    from gymlab._runtime.serve import free_port

    planned: list[Planned] = []
    urls: dict[str, str] = {}
    for spec in config.launch_order():
        spec.check_fields()
        _check_workers(spec)
        port = spec.port or free_port(spec.host)
        p = Planned(spec.instance, spec.server_type, spec.target(), spec.where, spec.host, port, {}, not spec.port)
        urls[spec.instance] = p.url
        p.config = spec.launch_config(urls, host=spec.host, port=port)
        planned.append(p)
    return planned


def _check_workers(spec) -> None:
    """Refuse ``num_workers > 1`` for a server that cannot have several, before anything starts."""
    n = int(spec.fields.get("num_workers", 1) or 1)
    if n <= 1:
        return
    from gymlab._runtime.workers import check_workers

    reason = check_workers(spec.server_cls(), n)
    if reason:
        raise ConfigError(f"{spec.where}.num_workers: {reason}")


def _stop(procs: list[tuple[Planned, subprocess.Popen]], timeout: float = 10.0) -> None:
    for _p, proc in reversed(procs):
        if proc.poll() is None:
            proc.terminate()
    deadline = time.monotonic() + timeout
    for _p, proc in procs:
        try:
            proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _on_sigterm(signum, frame):
    raise KeyboardInterrupt


def main(args: argparse.Namespace) -> int:
    from gymlab.collection.config import load_config
    from gymlab.collection.serve_one import spawn, wait_healthy

    config = load_config(*args.configs)
    if args.ray and not args.dry_run:
        return serve_ray(config, args)
    planned = plan(config)
    if args.dry_run:
        for p in planned:  # plan() has refused any num_workers a server cannot have
            url = p.url + (" (a free port)" if p.free else "")
            print(f"{p.name:<28} {p.server_type:<22} {url:<37} {p.target}")
        print(f"gymlab serve: {len(planned)} servers; config OK (dry run, nothing started)")
        return 0
    signal.signal(signal.SIGTERM, _on_sigterm)
    procs: list[tuple[Planned, subprocess.Popen]] = []
    try:
        for p in planned:
            procs.append((p, spawn(p.config, p.target, p.where)))
        for p, proc in procs:
            if why := wait_healthy(proc, p.url, args.startup_timeout):
                raise GymlabError(f"{p.where}: server {p.name} {why} (its output is above)")
            print(f"{p.name} -> {p.url}", flush=True)
        print(f"gymlab serve: all {len(procs)} servers are up; Ctrl-C stops them", flush=True)
        while True:
            for p, proc in procs:
                if proc.poll() is not None:
                    raise GymlabError(
                        f"server {p.name} ({p.url}) exited with code {proc.returncode}; stopping the others"
                    )
            time.sleep(0.2)
    except KeyboardInterrupt:
        print("gymlab serve: stopping", file=sys.stderr, flush=True)
        return 0
    finally:
        _stop(procs)


def serve_ray(config, args: argparse.Namespace) -> int:
    """The config's servers in Ray cells, each agent behind one door on this host, until Ctrl-C."""
    from gymlab.cli.collect import ray_options
    from gymlab.cluster.configs import config_pool
    from gymlab.cluster.front import serve_fronts

    with config_pool(config, **ray_options(args)) as pool:
        signal.signal(signal.SIGTERM, _on_sigterm)  # after ray.init, which installs its own
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
        except KeyboardInterrupt:
            print("gymlab serve: stopping", file=sys.stderr, flush=True)
            return 0
        finally:
            for runner in fronts.values():
                runner.stop()
