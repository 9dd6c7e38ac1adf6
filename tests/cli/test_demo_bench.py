"""``gymlab demo`` and ``gymlab bench`` run end to end (figures are printed, never asserted)."""

import json
from pathlib import Path

import gymlab
from gymlab.cli import main


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


def test_bench_quick_reports_both_layouts_beside_their_bare_ceilings(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["bench", "--quick", "--only", "start", "process", "lab", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert set(figures) >= {"machine", "start", "layouts"}
    layouts = figures["layouts"]
    assert layouts["stack"] and layouts["python"]
    for layout in ("process", "lab"):
        gymlab, bare = layouts[layout]["gymlab"], layouts[layout]["bare"]
        assert [p["concurrency"] for p in gymlab] == [p["concurrency"] for p in bare] == [1, 16, 64, 256]
        for point in gymlab + bare:
            assert point["episodes"] >= point["concurrency"] and point["episodes/s"] > 0
            assert point["cpu ms/episode"] >= 0
    assert set(layouts["process"]["hop us"]) == {"gymlab", "bare"}
    table = capsys.readouterr().out
    assert "bare eps/s" in table and "x bare" in table and "CPU ms/ep" in table
    assert "server CPU per tool call POST /square" in table and "Lab with three servers ready (ms)" in table


def test_bench_against_another_checkout_prints_both_and_the_ratio(tmp_path, capsys):
    checkout = Path(gymlab.__file__).resolve().parents[1]  # measured against itself: the columns, not the speed
    out = tmp_path / "bench.json"
    assert main(["bench", "--quick", "--only", "lab", "--against", str(checkout), "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert figures["against"]["checkout"] == str(checkout)
    assert [p["concurrency"] for p in figures["against"]["lab"]["gymlab"]] == [1, 16, 64, 256]
    assert "h11 + asyncio" in figures["against"]["stack"]  # the default --against-stack hides httptools and uvloop
    table = capsys.readouterr().out
    assert "before eps/s" in table and "speed-up" in table and "CPU cut" in table
