"""``gymlab demo`` and the benchmarks (``make bench``: ``python -m benchmarks``, not in the package) run
end to end (figures are printed, never asserted)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import gymlab
from gymlab.cli import main

ROOT = Path(__file__).resolve().parents[2]


def bench(*args: str) -> str:
    """``python -m benchmarks ARGS`` from the repository's root, with this checkout's gymlab; its output."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_demo_writes_rollouts_for_every_example(tmp_path, capsys):
    assert main(["demo", "--out", str(tmp_path), "--repeats", "2", "--concurrency", "4"]) == 0
    table = capsys.readouterr().out
    for env in ("calculator", "counter", "blackjack", "qa"):
        lines = (tmp_path / f"{env}_rollouts.jsonl").read_text().splitlines()
        records = [json.loads(line) for line in lines]
        assert records and all("reward" in r and r["steps"] for r in records)
        assert [r["_ng_rollout_index"] for r in records[:2]] == [0, 1]  # "aabbcc" order
        assert env in table
    calc = [json.loads(x) for x in (tmp_path / "calculator_rollouts.jsonl").read_text().splitlines()]
    assert all(r["reward"] == 1.0 for r in calc)


def test_bench_quick_reports_both_layouts_beside_their_bare_ceilings(tmp_path):
    out = tmp_path / "bench.json"
    table = bench("--quick", "--only", "start", "process", "lab", "--json", str(out))
    figures = json.loads(out.read_text())
    assert set(figures) >= {"machine", "start", "layouts"}
    layouts = figures["layouts"]
    assert layouts["stack"] and layouts["python"] and layouts["checkout"] == str(ROOT)
    for layout in ("process", "lab"):
        gymlab, bare = layouts[layout]["gymlab"], layouts[layout]["bare"]
        assert [p["concurrency"] for p in gymlab] == [p["concurrency"] for p in bare] == [1, 16, 64, 256]
        for point in gymlab + bare:
            assert point["episodes"] >= point["concurrency"] and point["episodes/s"] > 0
            assert point["cpu ms/episode"] >= 0
    assert set(layouts["process"]["hop us"]) == {"gymlab", "bare"}
    assert "bare eps/s" in table and "x bare" in table and "CPU ms/ep" in table
    assert "server CPU per tool call POST /square" in table and "Lab with three servers ready (ms)" in table


def test_bench_against_another_checkout_prints_both_and_the_ratio(tmp_path):
    checkout = Path(gymlab.__file__).resolve().parents[1]  # measured against itself: the columns, not the speed
    out = tmp_path / "bench.json"
    table = bench("--quick", "--only", "lab", "--against", str(checkout), "--json", str(out))
    figures = json.loads(out.read_text())
    assert figures["against"]["checkout"] == str(checkout)
    assert [p["concurrency"] for p in figures["against"]["lab"]["gymlab"]] == [1, 16, 64, 256]
    assert "h11 + asyncio" in figures["against"]["stack"]  # the default --against-stack hides httptools and uvloop
    assert "before eps/s" in table and "speed-up" in table and "CPU cut" in table


def test_the_frames_benchmark_builds_the_rows_it_times(tmp_path):
    out = tmp_path / "bench.json"
    bench("--quick", "--only", "frames", "--steps", "2000", "--json", str(out))
    figures = json.loads(out.read_text())["frames"]
    assert figures["step rows"] == 2_000 and figures["JSONL size (MB)"] > 1  # real-sized records: ~700 B a step
    assert any(key.startswith("records a run leaves in memory -> steps frame") for key in figures)
    assert figures["200 calculator episodes held as Rollouts (MB)"] > 0


def test_the_benchmarks_are_not_in_the_package():
    with pytest.raises(SystemExit):
        main(["bench"])  # the subcommand is gone: `make bench` runs them from a checkout
    assert not (Path(gymlab.__file__).parent / "bench").exists()
