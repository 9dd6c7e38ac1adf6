"""Notebooks 01-04 executed in a real kernel (nbclient); assertions on their application/json outputs."""

from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def run_notebook(name: str) -> tuple[dict, list[dict]]:
    """Execute ``notebooks/<name>``; return its last ``application/json`` output and every output."""
    book = nbformat.read(NOTEBOOKS / name, as_version=4)
    assert all(
        not c.get("outputs") and c.get("execution_count") is None for c in book.cells if c.cell_type == "code"
    ), f"{name} is committed with outputs"
    # deadlines for a loaded CI machine: per cell, and for the kernel to start
    NotebookClient(
        book, timeout=600, startup_timeout=180, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}
    ).execute()
    outputs = [o for c in book.cells if c.cell_type == "code" for o in c.outputs]
    found = [
        o["data"]["application/json"]
        for o in outputs
        if o.get("output_type") == "display_data" and "application/json" in o.get("data", {})
    ]
    assert found, f"{name} displayed no application/json output"
    return found[-1], outputs


def _html(outputs: list[dict]) -> str:
    return "".join(o.get("data", {}).get("text/html", "") for o in outputs)


def test_01_quickstart():
    out, outputs = run_notebook("01_quickstart.ipynb")
    assert out["episodes"] == 2 * 5 and out["mean_reward"] == 1.0
    assert out["tools"] == ["square"]
    assert out["step_rewards_sum"] == out["episode_rewards_sum"] == 10.0
    assert out["columns"][:4] == ["episode", "task", "repeat", "reward"]
    assert "<b>Rollouts</b>: 10 episodes" in _html(outputs)  # the rich repr of the run


def test_quickstart_file_is_the_code_of_notebook_01():
    book = nbformat.read(NOTEBOOKS / "01_quickstart.ipynb", as_version=4)
    text = (NOTEBOOKS / "QUICKSTART.md").read_text()
    for cell in book.cells[1:5]:
        assert cell.source in text


def test_02_prototype_environment():
    out, _ = run_notebook("02_prototype_environment.ipynb")
    assert out["first_reward"] == 1.0
    assert out["second_rewards"] == [0.5, 1.0, 0.0]
    assert out["servers"] == ["answer"]
    assert out["old_server_running"] is False and out["new_server_running"] is True


def test_03_step_through():
    out, outputs = run_notebook("03_step_through.ipynb")
    assert out["square"] == {"result": 16} and out["calculator_by_hand"] == 1.0
    assert out["counter_by_model"] == 1.0
    assert out["counter_branch"] == 0.0 and out["counter_branch_final"] == 11
    assert out["blackjack_hit"] == -1.0 and out["blackjack_stand"] == 1.0
    assert out["blackjack_model_steps"] == 2 and out["blackjack_terminated"] is True
    assert out["async_terminated"] is True
    assert out["sessions_left"] == 0
    html = _html(outputs)
    assert "calculator_server</b> (seed/verify, finished)" in html and "blackjack_env</b> (gymnasium, finished)" in html


def test_04_reward_curves():
    out, outputs = run_notebook("04_reward_curves.ipynb")
    assert out["episodes"] == {"hit below 17": 8 * 6, "always stand": 8 * 6}
    assert out["repeats"] == list(range(8))
    assert out["rewards_match"] is True
    assert out["figure_axes"] == [1, 1]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 4  # the four figures rendered inline
