"""Bad input and bad files: a torn or invalid file is reported with its line (JSONL) or row (Parquet);
a failed export leaves the old file whole; options a format cannot use are refused."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gymlab import DatasetError, export_dataset, export_rollouts, read_dataset
from gymlab.errors import ExportError
from gymlab.export.dataset import schema


def test_a_torn_rollouts_file_is_reported_with_its_line(tmp_path, collected):
    calc, _ = collected
    path = export_rollouts(calc, tmp_path / "r.jsonl")
    text = path.read_text()
    path.write_text(text[:-40])
    with pytest.raises(DatasetError, match=rf"r\.jsonl:{len(calc)}: torn last line") as info:
        export_dataset(path, tmp_path / "sft.parquet", "trl-sft")
    assert info.value.line == len(calc)
    assert not (tmp_path / "sft.parquet").exists() and not (tmp_path / "README.md").exists()


def test_an_invalid_jsonl_row_is_reported_with_its_line(tmp_path, collected):
    calc, _ = collected
    path = export_dataset(calc, tmp_path / "dpo.jsonl", "trl-dpo").path
    lines = path.read_text().splitlines()
    row = json.loads(lines[1])
    row["score_chosen"], row["score_rejected"] = row["score_rejected"], row["score_chosen"]
    path.write_text("\n".join([lines[0], json.dumps(row), *lines[2:]]) + "\n")
    with pytest.raises(DatasetError, match=r"dpo\.jsonl:2: not a trl-dpo row: score_chosen 0\.0 is not above"):
        read_dataset(path)
    path.write_text(lines[0] + "\n" + lines[1][:-30])
    with pytest.raises(DatasetError, match=r"dpo\.jsonl:2: torn last line"):
        read_dataset(path)
    sft = export_dataset(calc, tmp_path / "sft.jsonl", "trl-sft").path
    rows = sft.read_text().splitlines()
    orphan = json.loads(rows[0])  # an episode that called the tool
    orphan["messages"] = [m for m in orphan["messages"] if m["role"] != "assistant" or "tool_calls" not in m]
    sft.write_text("\n".join([rows[0], rows[1], json.dumps(orphan)]) + "\n")
    with pytest.raises(DatasetError, match=r"sft\.jsonl:3: not a trl-sft row: .*no earlier assistant"):
        read_dataset(sft)


def test_a_torn_parquet_file_is_reported(tmp_path, collected):
    _, count = collected
    path = export_dataset(count, tmp_path / "verl.parquet", "verl", ground_truth="target").path
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(DatasetError, match=r"verl\.parquet: not a readable Parquet file .*interrupted"):
        read_dataset(path)


def test_an_invalid_parquet_row_is_reported_with_its_row(tmp_path, collected):
    calc, _ = collected
    path = export_dataset(calc, tmp_path / "kto.parquet", "trl-kto").path
    rows = pq.read_table(path).to_pylist()
    rows[2]["tools"] = "[{not json"
    pq.write_table(pa.Table.from_pylist(rows, schema=schema("trl-kto")), path)
    with pytest.raises(DatasetError, match=r"kto\.parquet: row 3: not a trl-kto row: tools is not valid JSON"):
        read_dataset(path)
    rows[2]["tools"] = "[]"
    rows[3]["prompt"] = []
    pq.write_table(pa.Table.from_pylist(rows, schema=schema("trl-kto")), path)
    with pytest.raises(DatasetError, match=r"row 4: not a trl-kto row: prompt is empty"):
        read_dataset(path)
    # a column of another type than the format's is named with both types
    table = pq.read_table(path).set_column(2, "label", pa.array([1] * len(rows), pa.int64()))
    pq.write_table(table, path)
    with pytest.raises(DatasetError, match=r"column 'label' has type int64, trl-kto expects bool"):
        read_dataset(path, "trl-kto")


def test_a_row_with_a_column_missing_or_of_the_wrong_kind_is_named(tmp_path, collected):
    _, count = collected
    path = export_dataset(count, tmp_path / "grpo.jsonl", "trl-grpo", ground_truth="target").path
    good = json.loads(path.read_text().splitlines()[0])
    cases = [
        ({**good, "reward_mean": "high"}, r"reward_mean must be a number or null, got 'high'"),
        ({**good, "reward_mean": None, "ground_truth": None}, None),  # nulls where the format allows them
        ({**good, "ground_truth": 7}, r"ground_truth must be a string or null, got 7"),
        ({k: v for k, v in good.items() if k != "tools"}, r"not a trl-grpo row: no 'tools'"),
        ({"prompt": good["prompt"], "completion": []}, r"not a trl-kto row: no 'label'"),  # told by completion
        ({"prompt": good["prompt"], "tools": "[]"}, r"keys \['prompt', 'tools'\] are none of"),
    ]
    for row, error in cases:
        path.write_text(json.dumps(row) + "\n")
        if error is None:
            assert read_dataset(path) == [row]
            continue
        with pytest.raises(DatasetError, match=rf"grpo\.jsonl:1: .*{error}"):
            read_dataset(path)


def test_a_failed_export_leaves_the_old_file_whole(tmp_path, collected):
    _, count = collected
    path = export_dataset(count, tmp_path / "grpo.parquet", "trl-grpo", ground_truth="target").path
    before = path.read_bytes()
    with pytest.raises(ExportError, match=r"no field 'answer' for the ground truth; the row has final_count, .*target"):
        export_dataset(count, path, "trl-grpo", ground_truth="answer")
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md", "grpo.parquet"]  # no temp files left


def test_options_a_format_cannot_use_are_refused(tmp_path, collected):
    calc, _ = collected
    with pytest.raises(ValueError, match=r"best_of_n does not apply to trl-dpo; it takes min_margin, min_reward"):
        export_dataset(calc, tmp_path / "d.jsonl", "trl-dpo", best_of_n=1)
    with pytest.raises(ValueError, match=r"format must be one of trl-sft, trl-dpo"):
        export_dataset(calc, tmp_path / "d.jsonl", "dpo")
    with pytest.raises(ValueError, match=r"must end in \.parquet or \.jsonl"):
        export_dataset(calc, tmp_path / "d.csv", "trl-sft")
    with pytest.raises(ValueError, match="min_margin must be 0 or more"):
        export_dataset(calc, tmp_path / "d.jsonl", "trl-dpo", min_margin=-1)
