"""Notebook 05 (export) executed in a real kernel; assertions on its JSON output."""

from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def run_notebook(name: str) -> dict:
    """Execute ``notebooks/<name>`` and return its last ``application/json`` output."""
    book = nbformat.read(NOTEBOOKS / name, as_version=4)
    assert all(not c.get("outputs") for c in book.cells if c.cell_type == "code"), f"{name} is committed with outputs"
    NotebookClient(
        book,
        timeout=600,
        startup_timeout=180,
        kernel_name="python3",  # generous: CI may be loaded
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    ).execute()
    found = [
        o["data"]["application/json"]
        for c in book.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o.get("output_type") == "display_data" and "application/json" in o.get("data", {})
    ]
    assert found, f"{name} displayed no application/json output"
    return found[-1]


def test_05_export_dataset():
    out = run_notebook("05_export_dataset.ipynb")
    assert out["round_trip_identical"] is True
    assert out["sft_roles"] == ["system", "user", "assistant", "tool", "assistant"]
    assert out["sft_rows"] == out["sft_kept"] == out["tasks_with_reward"] > 0
    assert out["rl_rows"] == out["episodes"] == 15 and 0.0 in out["rl_rewards"] and 1.0 in out["rl_rewards"]
    assert out["torn_line"] == "15"
    assert out["dataset_rows"] == len(out["dataset_rewards"]) == 3
