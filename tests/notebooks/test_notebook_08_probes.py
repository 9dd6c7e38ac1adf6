"""Notebook 08 (reward probes) executed in a real kernel; assertions on its JSON output."""

from pathlib import Path

import nbformat
from nbclient import NotebookClient

from gymlab.probes import BUILTIN_PROBES

NOTEBOOK = Path(__file__).resolve().parents[2] / "notebooks" / "08_reward_probes.ipynb"


def run_notebook() -> dict:
    """Execute the notebook and return its last ``application/json`` output."""
    book = nbformat.read(NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") for c in book.cells if c.cell_type == "code"), "committed with outputs"
    NotebookClient(
        book,
        timeout=600,
        startup_timeout=180,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOK.parent)}},
    ).execute()
    found = [
        o["data"]["application/json"]
        for c in book.cells
        if c.cell_type == "code"
        for o in c.outputs
        if o.get("output_type") == "display_data" and "application/json" in o.get("data", {})
    ]
    assert found, "the notebook displayed no application/json output"
    return found[-1]


def test_08_reward_probes():
    out = run_notebook()
    # the hackable verify: the answer spray earns what the real policy earns, on every task
    assert out["flagged_before"] == ["answer_spray"] and out["html_has_flag"] is True
    assert out["spray_before"] == out["real_before"] == out["spray_episode_reward"] == 1.0
    # fixed: no probe earns reward, the real policy still does
    assert out["flagged_after"] == [] and out["hits_after"] == []
    assert out["spray_after"] == 0.0 and out["real_after"] == 1.0
    # a user's own probe runs beside the built-in ones
    assert out["mine_probes"] == [*BUILTIN_PROBES, "powers_of_ten"]
    assert out["mine_flagged"] == []
