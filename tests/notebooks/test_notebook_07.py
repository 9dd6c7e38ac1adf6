"""Notebook 07 (reward design) executed in a real kernel; assertions on its JSON output."""

from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def test_07_reward_design():
    book = nbformat.read(NOTEBOOKS / "07_reward_design.ipynb", as_version=4)
    assert all(not c.get("outputs") for c in book.cells if c.cell_type == "code"), "committed with outputs"
    assert book.cells[-1].cell_type == "markdown" and book.cells[-1].source.strip() == "## Probe the reward"
    NotebookClient(
        book, timeout=600, startup_timeout=180, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
    ).execute()
    found = [
        o["data"]["application/json"]
        for c in book.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o.get("output_type") == "display_data" and "application/json" in o.get("data", {})
    ]
    assert found, "the notebook displayed no application/json output"
    out = found[-1]
    assert out["episodes"] == 16
    assert out["components"] == ["correct", "concise"] and out["reward_is_weighted_sum"] is True
    assert out["episode_columns"] == out["step_columns"] == ["reward_correct", "reward_concise"]
    assert out["verdict"] == "CORRECT"
    # brief and right; long and right (0.8); right every other time; wrong but brief (0.2)
    assert out["task_means"] == pytest.approx([1.0, 0.8, 0.6, 0.2])
    assert out["pass_at_2"] == pytest.approx([1.0, 0.0, 1 - 1 / 6, 0.0])  # task 2: 1 - C(2,2)/C(4,2)
    assert out["always_0"] == [] and out["always_1"] == [0]
    assert out["nemo_files"] == [
        "open_qa_rollouts.jsonl",
        "open_qa_rollouts_agent_metrics.json",
        "open_qa_rollouts_repeat_level_metrics.json",
        "open_qa_rollouts_reward_profiling.jsonl",
    ]
    assert out["old_task_means"] == pytest.approx(out["task_means"])
    assert out["new_task_means"] == pytest.approx([1.0, 0.5, 0.75, 0.5])
    assert out["judge_failure"] == "judge_unparseable" and out["judge_failure_masked"] is True
    assert out["judge_failure_components"] == {"correct": None, "concise": 1.0}
