"""Notebook 05 (export) executed in a real kernel (it holds no checks: a probe cell added in memory
reports what it made)."""

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


#: Run in notebook 05's kernel after its own cells (the notebook itself holds no checks): what it made.
PROBE_05 = """
import json as _json
_dpo_rows = read_dataset(dpo_export.path)
display({"application/json": {
    "episodes": len(rollouts),
    "round_trip_identical": list(back) == list(rollouts),
    "sft_rows": len(sft),
    "sft_roles": [m["role"] for m in sft[0]["messages"]],
    "sft_kept": len(kept),
    "tasks_with_reward": len({r._ng_task_index for r in rollouts if r.reward >= 1.0}),
    "rl_rows": len(rl),
    "rl_rewards": [r["reward"] for r in rl],
    "torn_line": torn_error.split(": ")[0].rsplit(":", 1)[-1],
    "dataset_rows": len(dataset),
    "dataset_rewards": [r.reward for r in new_rollouts],
    "trl_sft_rows": sft_export.rows,
    "trl_sft_columns": pq.read_schema(sft_export.path).names,
    "episodes_at_1": sum(r.reward >= 1.0 and not r.mask_sample for r in rollouts),
    "dpo_columns": dpo.column_names,
    "dpo_scores": [[r["score_chosen"], r["score_rejected"]] for r in dpo],
    "dpo_rows_checked": len(_dpo_rows),
    "dpo_card": dpo_export.card.read_text(),
    "mixed_tasks": sum(len({r.reward for r in rollouts if r._ng_task_index == t and not r.mask_sample}) > 1
                       for t in {r._ng_task_index for r in rollouts}),
    "in_memory_equal": in_memory.to_list() == dpo.to_list(),
    "kto_labels": kto["label"],
    "kto_rewards": kto["reward"],
    "grpo_truths": [r["ground_truth"] for r in read_dataset(grpo_export.path)],
    "expected_truths": [str(int(re.findall(r"-?\\d+", row["responses_create_params"]["input"][-1]["content"])[-1]) ** 2)
                        for row in rows],
    "verl_columns": verl_schema.names,
    "verl_reward_model": str(verl_schema.field("reward_model").type),
    "verl_checked": [r["data_source"] for r in checked],
    "torn_parquet_error": torn_parquet_error,
}}, raw=True)
"""


def run_with_probe(name: str, probe: str) -> dict:
    """Execute ``notebooks/<name>`` with ``probe`` appended in memory; return the probe's JSON output."""
    book = nbformat.read(NOTEBOOKS / name, as_version=4)
    assert all(not c.get("outputs") for c in book.cells if c.cell_type == "code"), f"{name} is committed with outputs"
    assert not any("application/json" in c.source for c in book.cells), f"{name} holds its own checks"
    book.cells.insert(len(book.cells) - 1, nbformat.v4.new_code_cell(probe))  # before its last cell (lab.close())
    NotebookClient(
        book, timeout=600, startup_timeout=180, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
    ).execute()
    outputs = [o for c in book.cells if c.cell_type == "code" for o in c.outputs]
    found = [o["data"]["application/json"] for o in outputs if "application/json" in o.get("data", {})]
    assert len(found) == 1, f"{name}: the probe displayed nothing"
    return found[0]


def test_05_export_dataset():
    out = run_with_probe("05_export_dataset.ipynb", PROBE_05)
    assert out["round_trip_identical"] is True
    assert out["sft_roles"] == ["system", "user", "assistant", "tool", "assistant"]
    assert out["sft_rows"] == out["sft_kept"] == out["tasks_with_reward"] > 0
    assert out["rl_rows"] == out["episodes"] == 15 and 0.0 in out["rl_rewards"] and 1.0 in out["rl_rewards"]
    assert out["torn_line"] == "15"
    assert out["dataset_rows"] == len(out["dataset_rewards"]) == 3
    # the trainer formats
    assert out["trl_sft_columns"] == ["messages", "tools"] and out["trl_sft_rows"] == out["episodes_at_1"] > 0
    assert out["dpo_columns"] == ["prompt", "chosen", "rejected", "tools", "score_chosen", "score_rejected"]
    assert len(out["dpo_scores"]) == out["dpo_rows_checked"] == out["mixed_tasks"] > 0
    assert all(chosen > rejected for chosen, rejected in out["dpo_scores"])
    assert f"| rows written | {out['dpo_rows_checked']} |" in out["dpo_card"] and "min_margin" in out["dpo_card"]
    assert out["in_memory_equal"] is True
    assert out["kto_labels"] == [r >= 1.0 for r in out["kto_rewards"]] and len(out["kto_labels"]) == 15
    assert out["grpo_truths"] == out["expected_truths"]
    assert out["verl_columns"] == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    assert out["verl_reward_model"] == "struct<style: string, ground_truth: string>"
    assert out["verl_checked"] == ["calculator"] * len(out["expected_truths"])
    assert "torn.parquet: not a readable Parquet file" in out["torn_parquet_error"]
