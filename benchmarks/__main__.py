"""``make bench`` (``python -m benchmarks`` from the repository's root): the figures the README quotes,
each beside its ceiling, measured on this machine. Not part of the package: they measure it.

``process`` and ``lab`` (``layouts.py``): calculator episodes/s and CPU per episode at concurrency 1,
16, 64 and 256 in both layouts, and server CPU per tool-call hop, each beside a bare ASGI app on the
same server stack doing the same hops, and the ratio. They run in a subprocess of their own, so
``--against DIR`` runs the very same measurement with another checkout's ``gymlab`` in the same run
and prints both with the ratio. Other sections: import time, start-up, the async
HTTP clients, frames, collection, workers, the reward probes, hf_model (a local transformers model: one request
alone, then 8 and 16 at once) and instructions (a Lab episode's instructions under valgrind, beside ``--against``'s:
a count the machine's load barely moves).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--quick", action="store_true", help="fewer iterations (a smoke run)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    parser.add_argument("--only", nargs="*", help="run only these sections (process, lab, import, start, ...)")
    parser.add_argument(
        "--against",
        metavar="DIR",
        help="also measure the process and Lab layouts and the instructions with the gymlab of another checkout (DIR on PYTHONPATH)",
    )
    parser.add_argument(
        "--against-stack",
        choices=("asyncio", "installed"),
        default="asyncio",
        help="the server stack the --against checkout runs on: asyncio (h11 and the standard loop, as a "
        "checkout without httptools and uvloop as dependencies gets; the default) or installed",
    )
    parser.add_argument("--steps", type=int, help="step rows of the frames section (default 1,000,000; quick 100,000)")
    parser.add_argument(
        "--stack",
        choices=("installed", "asyncio"),
        default="installed",
        help="the server stack this checkout runs on (asyncio: hide httptools and uvloop, to compare)",
    )


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    memory = ""
    try:
        with open("/proc/meminfo") as f:
            kb = int(next(line.split()[1] for line in f if line.startswith("MemTotal")))
        memory = f", {kb / 2**20:.0f} GiB"
    except (OSError, StopIteration, ValueError):
        pass
    load = f", load average {os.getloadavg()[0]:.1f} at start" if hasattr(os, "getloadavg") else ""
    return f"{os.cpu_count()} cores, {cpu}{memory}, Python {platform.python_version()}, {platform.system()}{load}"


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def bench_import(n: int) -> dict[str, Any]:
    def once(code: str) -> float:
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        return time.perf_counter() - t

    base = statistics.median(once("pass") for _ in range(n))
    light = statistics.median(once("import gymlab") for _ in range(n))
    lab = statistics.median(once("import gymlab; gymlab.Lab") for _ in range(n))
    return {"import gymlab (ms)": _ms(light - base), "import gymlab + Lab (ms)": _ms(lab - base)}


def _calculator():
    from gymlab.examples import example_rows, load_environment

    return load_environment("calculator"), example_rows("calculator")


def bench_start(n: int) -> dict[str, Any]:
    from gymlab.lab import Lab

    calc, _ = _calculator()
    one, three = [], []
    for _ in range(n):
        with Lab() as lab:
            t = time.perf_counter()
            env = lab.serve(calc.CalculatorServer)
            one.append(time.perf_counter() - t)
            model = lab.serve_model(calc.policy)
            lab.serve_agent("simple_agent", resources=env, model=model)
            three.append(time.perf_counter() - t)
    return {
        "one server ready (ms)": _ms(statistics.median(one)),
        "Lab with three servers ready (ms)": _ms(statistics.median(three)),
    }


def bench_clients(n: int) -> dict[str, Any]:
    """aiohttp vs httpx.AsyncClient POSTing to a calculator served by another process."""
    import socket

    import aiohttp
    import httpx

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = (
        "from gymlab.examples import load_environment as L; "
        f"L('calculator').CalculatorServer(port={port}).run_webserver()"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}/square"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx.post(url, json={"value": 1}, timeout=1)
                break
            except httpx.TransportError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise RuntimeError("benchmark server did not start")
                time.sleep(0.05)

        async def run(post: Callable, conc: int) -> float:
            sem = asyncio.Semaphore(conc)

            async def one():
                async with sem:
                    await post()

            await asyncio.gather(*(one() for _ in range(20)))  # warm-up
            t = time.perf_counter()
            await asyncio.gather(*(one() for _ in range(n)))
            return n / (time.perf_counter() - t)

        async def compare() -> dict[str, Any]:
            res: dict[str, Any] = {}
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as a:

                async def ap():
                    async with a.post(url, json={"value": 3}) as r:
                        await r.read()

                for conc in (1, 16):
                    res[f"aiohttp req/s, concurrency {conc}"] = round(await run(ap, conc))
            async with httpx.AsyncClient(limits=httpx.Limits(max_connections=None)) as h:

                async def hp():
                    (await h.post(url, json={"value": 3})).read()

                for conc in (1, 16):
                    res[f"httpx.AsyncClient req/s, concurrency {conc}"] = round(await run(hp, conc))
            return res

        return asyncio.run(compare())
    finally:
        proc.terminate()
        proc.wait(10)


#: More sections: (module, function, kwargs for a full and a quick run).
SECTIONS = {
    "frames": ("benchmarks.frames", "frames_benchmark", {"n_steps": 1_000_000}, {"n_steps": 100_000}),
    "collection": ("benchmarks.collection", "collection_throughput", {"n_rows": 10_000}, {"n_rows": 1_000}),
    "workers": ("benchmarks.workers", "workers_benchmark", {}, {"quick": True}),
    "hf_model": ("benchmarks.hf_model", "hf_model_benchmark", {}, {"quick": True}),
    "probes": ("benchmarks.probes", "probes_benchmark", {"sizes": (5, 100)}, {"sizes": (5,)}),
}


def main(args: argparse.Namespace) -> int:
    n = 100 if args.quick else 1000
    sections: dict[str, Callable[[], dict]] = {
        "import": lambda: bench_import(3 if args.quick else 10),
        "start": lambda: bench_start(5 if args.quick else 20),
        "clients": lambda: bench_clients(n),
        "instructions": lambda: importlib.import_module("benchmarks.instructions").instructions_benchmark(
            args.against, 100 if args.quick else 300
        ),
    }
    for name, (module, func, full, quick) in SECTIONS.items():
        kwargs = dict(quick if args.quick else full)
        if name == "frames" and args.steps:
            kwargs["n_steps"] = args.steps
        sections[name] = lambda module=module, func=func, kwargs=kwargs: getattr(importlib.import_module(module), func)(
            **kwargs
        )
    figures: dict[str, Any] = {"machine": machine()}
    print(f"benchmarks on {figures['machine']}")
    layouts = [name for name in ("process", "lab") if not args.only or name in args.only]
    if layouts:
        from benchmarks.report import measure_layouts, print_layouts

        measured = measure_layouts(layouts, args.quick, args.stack, args.against, args.against_stack)
        figures.update(measured)
        print_layouts(measured)
    for name, fn in sections.items():
        if args.only and name not in args.only:
            continue
        result = fn()
        figures[name] = result
        print(f"\n[{name}]")
        for key, value in result.items():
            print(f"  {key:<52} {value}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)
    return 0


if __name__ == "__main__":
    p = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__.splitlines()[0])
    add_arguments(p)
    raise SystemExit(main(p.parse_args()))
