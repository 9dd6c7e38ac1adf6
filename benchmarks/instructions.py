"""Instructions per Lab calculator episode, counted by valgrind's callgrind: the count moves with what else
the machine runs by a few percent (how many tasks each loop turn finds ready), CPU seconds by up to a third,
so it is the steadier comparison of two checkouts (``--against``) in one run on a shared machine.

Each checkout runs the same workload twice under callgrind, with no episodes and with ``n`` (concurrency
16, after the same warm-up); the difference over ``n`` is one episode's instructions, start-up left out.
Under valgrind everything runs about 50 times slower, so the calculator's policy always takes its worker
thread (the real run calls a fast policy inline): the count includes that hand-off.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

WORKLOAD = """
import sys
from gymlab.examples import example_rows, load_environment
from gymlab.lab import Lab

rows, calc, n = example_rows("calculator"), load_environment("calculator"), int(sys.argv[1])
with Lab() as lab:
    env = lab.serve(calc.CalculatorServer)
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(calc.policy))
    lab.run_many(agent, rows[:8], concurrency=4)
    if n:
        lab.run_many(agent, [rows[i % len(rows)] for i in range(n)], concurrency=16)
"""


def _collected(root: Path, n: int, tmp: str) -> int:
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONHASHSEED": "0"}
    script = Path(tmp, "workload.py")
    script.write_text(WORKLOAD)
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={tmp}/cg.{n}", sys.executable, str(script), str(n)]
    done = subprocess.run(cmd, env=env, cwd=tmp, capture_output=True, text=True)
    found = re.search(r"Collected : (\d+)", done.stderr)
    if done.returncode != 0 or found is None:
        raise RuntimeError(f"the workload failed under valgrind for {root}:\n{done.stderr[-2000:]}")
    return int(found[1])


def per_episode(root: Path, n: int) -> float:
    """Instructions of one episode of ``root``'s gymlab: both runs side by side, so they see the same load."""
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(2) as pool:
        empty, full = pool.map(lambda k: _collected(root, k, tmp), (0, n))
    return (full - empty) / n


def instructions_benchmark(against: str | None = None, n: int = 300) -> dict[str, Any]:
    if shutil.which("valgrind") is None:
        return {"skipped": "valgrind is not installed (Debian: apt-get install valgrind)"}
    import gymlab

    here = per_episode(Path(gymlab.__file__).resolve().parents[1], n)
    out: dict[str, Any] = {"instructions per Lab episode (M)": round(here / 1e6, 3)}
    if against:
        before = per_episode(Path(against).resolve(), n)
        out["--against: instructions per Lab episode (M)"] = round(before / 1e6, 3)
        out["this checkout / --against"] = round(here / before, 3)
    return out
