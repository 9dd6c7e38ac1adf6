"""Benchmark figures for the reward probes: every built-in probe and the real policy over the calculator."""

from __future__ import annotations

import time
from typing import Any


def probes_benchmark(sizes: tuple[int, ...] = (5, 100)) -> dict[str, Any]:
    """Wall and CPU seconds of ``probe(lab, env, rows)`` with every built-in probe (each variant a run)
    and the real policy, over the calculator example's rows (``sizes``: how many; past its 5, the same
    question about other numbers). All servers run in threads of this process."""
    from gymlab.examples import example_rows, load_environment
    from gymlab.lab import Lab
    from gymlab.probes import BUILTIN_PROBES, probe
    from gymlab.probes.policies import run_names

    calc = load_environment("calculator")
    base = example_rows("calculator")
    out: dict[str, Any] = {"probes": len(BUILTIN_PROBES), "runs": len(run_names(BUILTIN_PROBES))}
    for n in sizes:
        rows = base[:n] + [
            {**base[0], "responses_create_params": {"input": f"What is {i} squared?"}} for i in range(100, 100 + n - 5)
        ]
        with Lab() as lab:
            env = lab.serve(calc.CalculatorServer)
            wall, cpu = time.perf_counter(), time.process_time()
            report = probe(lab, env, rows, real_policy=calc.policy)
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        if report.flagged:
            raise RuntimeError(f"the calculator was flagged: {report.flagged}")
        episodes = sum(len(r) for r in report.rollouts.values()) + len(report.real)
        out[f"{n} rows: episodes"] = episodes
        out[f"{n} rows: seconds wall / CPU"] = f"{wall:.2f} / {cpu:.2f}"
        out[f"{n} rows: episodes/s"] = round(episodes / wall, 1)
    return out
