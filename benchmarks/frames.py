"""The data-side benchmark: steps frames of a million step rows, and the memory of held rollouts.

Figures (wall seconds, and the process's CPU seconds beside them, which a busy machine disturbs less;
each as min / median of several builds, each from a new ``Rollouts``):
- a rollouts JSONL file -> steps frame (``Rollouts.load(path).steps_frame()``), the file synced to disk first;
- the records a run leaves in memory -> steps frame: they arrive as a run at concurrency 16 returns
  them, and the time is from the last record to the frame;
- records in memory that were never read (``Rollouts(records)``) -> steps frame, and again (the
  Arrow columns read are kept with the records);
- the memory of calculator episodes held as ``Rollouts`` (traced allocations), and per episode;
- the collection writer's records/s.

Input comes from ``benchmarks.records.synthetic`` (counter-shaped records as simple_agent writes
them, about 700 bytes of JSON a step); its lines are repeated to reach the size.
"""

from __future__ import annotations

import functools
import gc
import os
import random
import statistics
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from benchmarks.records import synthetic

_BUILT = 200  # episodes built by ``synthetic``; their lines are repeated up to the size asked
UNIT = "(s wall min / median ; s CPU min / median)"


def _lines(n_episodes: int, steps_per_episode: int) -> list[bytes]:
    base = [
        r.model_dump_json(exclude_none=True).encode() for r in synthetic(min(n_episodes, _BUILT), steps_per_episode)
    ]
    return [base[i % len(base)] for i in range(n_episodes)]


def _timed(fn) -> tuple[float, float, Any]:
    gc.collect()
    w, c = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - w, time.process_time() - c, out


def _repeated(fn, repeats: int, rows: int, setup=None) -> str:
    """``fn`` timed ``repeats`` times: wall min / median ; CPU min / median (seconds). With ``setup``,
    each time ``fn(setup())``, the setup untimed."""
    walls, cpus = [], []
    for _ in range(repeats):
        wall, cpu, frame = _timed(fn if setup is None else functools.partial(fn, setup()))
        assert len(frame) == rows
        walls.append(wall)
        cpus.append(cpu)
        frame = None
    med = statistics.median
    return f"{min(walls):.2f} / {med(walls):.2f} ; {min(cpus):.2f} / {med(cpus):.2f}"


def frames_benchmark(
    n_steps: int = 1_000_000, steps_per_episode: int = 20, memory_episodes: int | None = None, repeats: int = 5
):
    """The figures of the module docstring, as a dict; ``memory_episodes`` defaults to ``n_steps // 10``."""
    import pandas  # noqa: F401  (its one-time import is not part of the figures)

    import gymlab.lab.columnar  # noqa: F401  (nor is pyarrow's)
    from gymlab.lab.runs import Rollouts
    from gymlab.lab.store import RecordStore

    n_episodes = max(1, n_steps // steps_per_episode)
    lines = _lines(n_episodes, steps_per_episode)
    rows = n_episodes * steps_per_episode
    figures: dict[str, Any] = {"step rows": rows, "steps per record": steps_per_episode}
    with tempfile.TemporaryDirectory(prefix="gymlab-bench-") as tmp:
        path = Path(tmp) / "rollouts.jsonl"
        with open(path, "wb") as f:  # on disk before the timing, as a file one loads usually is: a file
            f.write(b"\n".join(lines) + b"\n")  # still being written back slows its reading by a third or more
            os.fsync(f.fileno())
        figures["JSONL size (MB)"] = round(path.stat().st_size / 1e6, 1)
        figures[f"JSONL file -> steps frame {UNIT}"] = _repeated(
            lambda: Rollouts.load(path).steps_frame(full=True), repeats, rows
        )
    figures.update(run_records_benchmark(lines, rows, repeats))
    held = RecordStore.from_records(lines)
    del lines

    def fresh() -> Rollouts:  # the same records, without the columns an earlier frame kept
        return Rollouts(store=RecordStore(held.buffer, held.starts))

    figures[f"records in memory, never read -> steps frame {UNIT}"] = _repeated(
        lambda: fresh().steps_frame(full=True), repeats, rows
    )
    again = fresh()
    again.steps_frame(full=True)
    figures[f"records in memory -> steps frame again (columns kept) {UNIT}"] = _repeated(
        functools.partial(again.steps_frame, full=True), repeats, rows
    )
    again = held = None  # let the records go before the memory figure
    figures.update(memory_benchmark(memory_episodes if memory_episodes is not None else max(1, n_steps // 10)))
    figures.update(writer_benchmark(max(1, n_steps // 50)))
    return figures


def run_records_benchmark(lines: list[bytes], rows: int, repeats: int, concurrency: int = 16) -> dict[str, Any]:
    """A run's records -> steps frame: ``lines`` added to a ``StoreBuilder`` in the order a run at
    ``concurrency`` finishes them (each window of that many shuffled, seeded), then timed from the
    last record to the frame (``finish`` and the first ``steps_frame``)."""
    from gymlab.lab.runs import Rollouts
    from gymlab.lab.store import StoreBuilder

    order = list(range(len(lines)))
    shuffle = random.Random(0).shuffle
    for start in range(0, len(order), concurrency):
        window = order[start : start + concurrency]
        shuffle(window)
        order[start : start + concurrency] = window

    def arrived() -> StoreBuilder:  # the run's records added as they finish
        builder = StoreBuilder(len(lines))
        for position in order:
            builder.add(position, lines[position])
        return builder

    def frame(builder: StoreBuilder):
        return Rollouts(store=builder.finish()).steps_frame(full=True)

    return {f"records a run leaves in memory -> steps frame {UNIT}": _repeated(frame, repeats, rows, setup=arrived)}


def writer_benchmark(n_records: int = 20_000) -> dict[str, Any]:
    """Records/s of the collection writer (``LineWriter``: orjson, one ``os.write`` a record)."""
    import orjson

    from gymlab.jsonl import LineWriter

    record = orjson.loads(calculator_lines(1)[0])
    with tempfile.TemporaryDirectory(prefix="gymlab-bench-") as tmp:
        writer = LineWriter(Path(tmp) / "rollouts.jsonl")
        try:
            wall, cpu, _ = _timed(lambda: [writer.write(record) for _ in range(n_records)])
        finally:
            writer.close()
    return {"collection writer, calculator records/s (wall / CPU)": f"{n_records / wall:,.0f} / {n_records / cpu:,.0f}"}


def calculator_lines(n: int) -> list[bytes]:
    """``n`` calculator episode records as JSON lines (each example row run once, then repeated)."""
    from gymlab.examples import example_rows, load_environment
    from gymlab.lab.lab import Lab

    calculator = load_environment("calculator")
    with Lab() as lab:
        agent = lab.serve_agent(
            "simple_agent", resources=lab.serve(calculator.CalculatorServer), model=lab.serve_model(calculator.policy)
        )
        run = lab.run_many(agent, example_rows("calculator"))
    base = run.store.lines()
    return [base[i % len(base)].rstrip(b"\n") for i in range(n)]


def memory_benchmark(n_episodes: int = 100_000) -> dict[str, Any]:
    """Traced memory of ``n_episodes`` calculator episodes held as ``Rollouts`` (loaded from a file)."""
    from gymlab.lab.runs import Rollouts

    lines = calculator_lines(n_episodes)
    with tempfile.TemporaryDirectory(prefix="gymlab-bench-") as tmp:
        path = Path(tmp) / "calculator.jsonl"
        path.write_bytes(b"\n".join(lines) + b"\n")
        size = path.stat().st_size
        del lines
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            held = Rollouts.load(path)
            assert len(held) == n_episodes and held[n_episodes - 1].reward is not None  # records validate on use
            used = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
    return {
        f"{n_episodes:,} calculator episodes held as Rollouts (MB)": round(used / 1e6, 1),
        "held per episode (KB) / its JSON (KB)": f"{used / n_episodes / 1e3:.2f} / {size / n_episodes / 1e3:.2f}",
    }
