"""``gymlab export``: a rollouts file to a trainer dataset, its help, and its one-line errors."""

from __future__ import annotations

import pyarrow.parquet as pq
import pytest

from gymlab import export_rollouts, read_dataset
from gymlab.cli import main


def test_export_writes_the_file_and_its_card(tmp_path, collected, capsys):
    calc, count = collected
    a = export_rollouts(calc, tmp_path / "calc.jsonl")
    b = export_rollouts(count, tmp_path / "count.jsonl")
    out = tmp_path / "dpo" / "train.parquet"
    assert main(["export", str(a), str(b), "--format", "trl-dpo", "-o", str(out), "--min-margin", "0.5"]) == 0
    said = capsys.readouterr().out
    rows = read_dataset(out)
    assert f"wrote {len(rows)} trl-dpo rows to {out}" in said and "ties dropped 5" in said
    assert pq.read_schema(out).names[:3] == ["prompt", "chosen", "rejected"]
    card = (out.parent / "README.md").read_text()
    assert f"`{a}` ({len(calc)} episodes)" in card and f"`{b}` ({len(count)} episodes)" in card
    assert "- `min_margin`: 0.5" in card
    grpo = tmp_path / "grpo.jsonl"
    assert main(["export", str(b), "-f", "trl-grpo", "-o", str(grpo), "--ground-truth", "target", "--no-card"]) == 0
    assert [r["ground_truth"] for r in read_dataset(grpo)] == [str(r.target) for r in count[::2]]


def test_help_names_the_formats_and_their_columns(capsys):
    with pytest.raises(SystemExit):
        main(["export", "--help"])
    text = capsys.readouterr().out
    for name in ("trl-sft", "trl-dpo", "trl-kto", "trl-grpo", "verl", "reward_model {style, ground_truth}"):
        assert name in text


def test_errors_are_one_line_with_the_line_number(tmp_path, collected, capsys):
    calc, _ = collected
    path = export_rollouts(calc, tmp_path / "r.jsonl")
    path.write_text(path.read_text()[:-25])
    assert main(["export", str(path), "-f", "trl-sft", "-o", str(tmp_path / "s.parquet")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gymlab export: error: {path}:{len(calc)}: torn last line") and "Traceback" not in err
    good = export_rollouts(calc, tmp_path / "g.jsonl")
    assert main(["export", str(good), "-f", "trl-dpo", "-o", str(tmp_path / "d.jsonl"), "--best-of-n", "1"]) == 2
    assert "--best-of-n does not apply to trl-dpo" in capsys.readouterr().err
    assert main(["export", str(good), "-f", "trl-sft", "-o", str(tmp_path / "d.csv")]) == 2
    assert "must end in .parquet or .jsonl" in capsys.readouterr().err
