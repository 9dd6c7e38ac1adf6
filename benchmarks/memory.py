"""Memory of the run engine's two sinks, on the calculator example with its rule-based policy.

- ``collect``: the calculator config collected (its servers in threads of this process) into a
  temporary folder; peak RSS, and RSS sampled as the episodes go (the JSONL sink holds no record
  once written, so it should stay flat in the number of episodes).
- ``run_many``: the calculator served in a ``Lab``; RSS held after the run and after building the
  episodes and steps frames, against the bytes of the run's JSON lines.

Each measurement runs in a fresh process (``python -m benchmarks.memory collect 100000``) so its
peak is its own; ``python -m benchmarks.memory all`` runs the figures the targets name and prints
one JSON object per measurement. Self-contained: nothing here is imported by the package.
"""

from __future__ import annotations

import gc
import json
import os
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mb() -> float:
    """Resident set size of this process now, in MB."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE / 1e6


def settle() -> float:
    """RSS in MB after a full collection, and after glibc and pyarrow's pool hand freed pages back
    (``malloc_trim``, ``release_unused``: memory freed but kept by an allocator is not held by the
    records)."""
    import ctypes

    gc.collect()
    if "pyarrow" in sys.modules:
        sys.modules["pyarrow"].default_memory_pool().release_unused()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass
    return rss_mb()


def peak_mb() -> float:
    """Peak resident set size of this process so far, in MB (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e6


class Sampler:
    """RSS every ``interval`` seconds in a thread, with the count ``progress()`` gives at that moment."""

    def __init__(self, progress, interval: float = 1.0):
        self.progress, self.interval = progress, interval
        self.samples: list[tuple[int, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.samples.append((self.progress(), rss_mb()))

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def _calculator_config() -> Path:
    from gymlab.examples import environment_dir

    return environment_dir("calculator") / "configs" / "calculator.yaml"


def measure_collect(n: int, concurrency: int = 32) -> dict[str, Any]:
    """``collect`` of ``n`` calculator episodes (its 5 rows, ``n / 5`` repeats each)."""
    from gymlab.collection import collect

    repeats = max(1, n // 5)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "run.jsonl"

        def written() -> int:
            try:
                with open(out, "rb") as f:
                    return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))
            except FileNotFoundError:
                return 0

        before = rss_mb()
        t0 = time.perf_counter()
        with Sampler(written, interval=2.0) as sampler:
            result = collect(_calculator_config(), out, repeats=repeats, concurrency=concurrency, progress=False)
        seconds = time.perf_counter() - t0
        file_mb = out.stat().st_size / 1e6
    return {
        "what": "collect",
        "episodes": result.n_rollouts,
        "failed": result.n_failures,
        "mean_reward": result.mean_reward,
        "seconds": round(seconds, 1),
        "rss_before_mb": round(before, 1),
        "peak_rss_mb": round(peak_mb(), 1),
        "file_mb": round(file_mb, 1),
        "rss_by_episodes_mb": [(k, round(v, 1)) for k, v in sampler.samples[:: max(1, len(sampler.samples) // 12)]],
    }


def measure_run_many(n: int, concurrency: int = 32) -> dict[str, Any]:
    """``lab.run_many`` of ``n`` calculator episodes, then its episodes and steps frames."""
    from gymlab.examples import example_rows, load_environment
    from gymlab.lab import Lab

    calculator = load_environment("calculator")
    rows = example_rows("calculator")
    with Lab() as lab:
        env = lab.serve(calculator.CalculatorServer, name="calculator")
        model = lab.serve_model(calculator.policy)
        agent = lab.serve_agent("simple_agent", resources=env, model=model)
        warm = lab.run_many(agent, rows, repeats=2)  # everything imported and warm before the baseline
        warm.episodes, warm.steps  # noqa: B018 (pandas and pyarrow imported: modules, not records)
        lab.last_run = warm = None
        gc.collect()
        before, before_trimmed = rss_mb(), settle()
        t0 = time.perf_counter()
        rollouts = lab.run_many(agent, rows, repeats=max(1, n // 5), concurrency=concurrency)
        seconds = time.perf_counter() - t0
        lines_mb = len(rollouts.store.buffer) / 1e6
        gc.collect()
        after_run = rss_mb()
        after_run_trimmed = settle()
        episodes, steps = rollouts.episodes, rollouts.steps
        gc.collect()
        after_frames = rss_mb()
        after_frames_trimmed = settle()
        out = {
            "what": "run_many",
            "episodes": len(rollouts),
            "steps": len(steps),
            "episode_rows": len(episodes),
            "mean_reward": rollouts.mean_reward,
            "seconds": round(seconds, 1),
            "json_lines_mb": round(lines_mb, 1),
            "rss_before_mb": round(before, 1),
            "held_after_run_mb": round(after_run - before, 1),
            "held_with_frames_mb": round(after_frames - before, 1),
            "held_with_frames_over_lines": round((after_frames - before) / lines_mb, 2),
            "trimmed_held_after_run_mb": round(after_run_trimmed - before_trimmed, 1),
            "trimmed_held_with_frames_mb": round(after_frames_trimmed - before_trimmed, 1),
            "trimmed_held_with_frames_over_lines": round((after_frames_trimmed - before_trimmed) / lines_mb, 2),
            "peak_rss_mb": round(peak_mb(), 1),
        }
        lab.last_run = None
    return out


def run_in_subprocess(what: str, n: int) -> dict[str, Any]:
    """One measurement in a fresh interpreter (its own peak)."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.memory", what, str(n)], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        raise RuntimeError(f"{what} {n} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str]) -> int:
    what = argv[0] if argv else "all"
    if what == "all":
        for step, n in (("collect", 10_000), ("collect", 100_000), ("run_many", 100_000)):
            print(
                json.dumps({"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), **run_in_subprocess(step, n)})
            )
            sys.stdout.flush()
        return 0
    n = int(argv[1]) if len(argv) > 1 else 10_000
    measure = {"collect": measure_collect, "run_many": measure_run_many}[what]
    print(json.dumps(measure(n)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
