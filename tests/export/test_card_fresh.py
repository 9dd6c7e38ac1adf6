"""Files that load fresh: ``datasets.load_dataset(folder)`` (the library TRL and verl read with) returns the
rows of the latest export after re-exports into the same folder and into another folder of the same
name, in this process and in a new one; the default ground truth is the rows' answer field when every
row has one, and the card says what the column holds."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import datasets
import pytest

from benchmarks.records import synthetic
from gymlab import export_dataset, read_dataset

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
datasets.disable_progress_bars()


def records(n: int, steps: int = 2):
    return synthetic(n, steps)


def loaded(folder, cache) -> list[dict]:
    return datasets.load_dataset(str(folder), split="train", cache_dir=str(cache)).to_list()


def loaded_in_a_new_process(folder, cache) -> list[dict]:
    code = (
        "import datasets, json, sys; datasets.disable_progress_bars(); "
        "print(json.dumps(datasets.load_dataset(sys.argv[1], split='train', cache_dir=sys.argv[2]).to_list()))"
    )
    env = {**os.environ, "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", code, str(folder), str(cache)], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_a_folder_loads_the_latest_export_in_this_process(tmp_path, suffix):
    cache, first, second = tmp_path / "hf-cache", tmp_path / "a" / "data", tmp_path / "b" / "data"
    exports = [(first, 3), (first, 5), (second, 2), (first, 4)]  # again, the same folder; another folder "data"
    for folder, n in exports:
        path = export_dataset(records(n, steps=n % 3 + 2), folder / f"sft{suffix}", "trl-sft").path
        rows = loaded(folder, cache)
        assert len(rows) == n and rows == [{**r, "tools": r["tools"]} for r in read_dataset(path)], (folder, n)


def test_a_file_name_yaml_would_misread_is_quoted_in_the_card(tmp_path):
    folder = tmp_path / "odd"
    path = export_dataset(records(3), folder / "sft #1.jsonl", "trl-sft").path
    assert len(loaded(folder, tmp_path / "hf-cache")) == 3 and path.name == "sft #1.jsonl"


def test_a_folder_loads_the_latest_export_in_a_new_process(tmp_path):
    cache, folder = tmp_path / "hf-cache", tmp_path / "data"
    export_dataset(records(3), folder / "sft.parquet", "trl-sft")
    assert len(loaded(folder, cache)) == 3  # cached here, read by the next process
    export_dataset(records(6, steps=3), folder / "sft.parquet", "trl-sft")  # sizes that differ from the cache's
    rows = loaded_in_a_new_process(folder, cache)
    assert len(rows) == 6 and rows == read_dataset(folder / "sft.parquet")
    card = (folder / "README.md").read_text()
    assert "config_name: trl-sft-" in card and "default: true" in card


def rows_with(fields: list[dict]) -> list[dict]:
    return [{"responses_create_params": {"input": f"task {i}"}, "_ng_task_index": i, **f} for i, f in enumerate(fields)]


def test_the_default_ground_truth_is_the_answer_field_and_the_card_says_so(tmp_path):
    recs = records(3)
    answers = rows_with([{"answer": str(40 + i), "difficulty": "easy"} for i in range(3)])
    result = export_dataset(recs, tmp_path / "a" / "grpo.parquet", "trl-grpo", rows=answers)
    assert [r["ground_truth"] for r in read_dataset(result.path)] == ["40", "41", "42"]
    assert "the task row's `answer` field (every row has one)" in result.card.read_text()
    # no answer field in every row: the row's own fields, a JSON object, and the card says that
    mixed = rows_with([{"answer": "1"}, {"target": 2}, {"target": 3}])
    result = export_dataset(recs, tmp_path / "b" / "verl.parquet", "verl", rows=mixed)
    truths = [json.loads(r["reward_model"]["ground_truth"]) for r in read_dataset(result.path)]
    assert truths == [{"answer": "1"}, {"target": 2}, {"target": 3}]
    assert "the task row's own input fields (answer, target) as a JSON object" in result.card.read_text()
    named = export_dataset(recs, tmp_path / "c" / "grpo.jsonl", "trl-grpo", ground_truth="target")
    assert [r["ground_truth"] for r in read_dataset(named.path)] == ["1", "1", "1"]  # a field named still wins
