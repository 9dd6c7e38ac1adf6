"""``gymlab demo`` and ``gymlab bench`` run end to end (figures are printed, never asserted)."""

import json

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


def test_bench_quick_reports_its_sections(tmp_path, capsys):
    out = tmp_path / "bench.json"
    assert main(["bench", "--quick", "--only", "start", "episodes", "--json", str(out)]) == 0
    figures = json.loads(out.read_text())
    assert set(figures) >= {"machine", "start", "episodes"}
    assert figures["episodes"]["calculator episodes/s, concurrency 16"] > 0
    assert "Lab with three servers ready (ms)" in capsys.readouterr().out
