"""Notebook 11 (train on your environment) executed in a kernel of the test venv (the ``train`` extra)."""

import sys

import pytest

from tests.notebooks.kernel import run_notebook

pytest.importorskip("trl", reason="notebook 11 needs the train extra")

PROBE = """{
    "python": __import__("sys").executable,
    "flagged": report.flagged,
    "before": len(before),
    "before_masked": sum(r.mask_sample for r in before),
    "before_tokens": all(r.response.output[0].model_dump().get("generation_token_ids") for r in before),
    "after": len(after),
    "after_tokens": all(tokens),
    "logged": [e["reward"] for e in trainer.state.log_history if "reward" in e],
    "tool_calls": sum(e.get("tools/call_frequency", 0) for e in trainer.state.log_history),
    "training": len(training),
    "steps_on_records": sorted({r.train_step for r in training}),
    "file_lines": len((out / "guess_train.jsonl").read_text().splitlines()),
    "rl_lines": len(rl.read_text().splitlines()),
    "open_sessions": envs.open_sessions,
    "server_sessions": len(env.server.session_state),
    "panel": [run.panel.done, run.panel.kept, run.panel.renders > 0],
    "curve_drawn": run._curve.value[:8] == b"\\x89PNG\\r\\n\\x1a\\n",
}"""


def test_11_train_on_your_environment():
    out, outputs = run_notebook("11_train_on_your_environment.ipynb", PROBE, test_venv=True)
    assert out["python"] == sys.executable  # the test venv's kernel, which has the train extra
    assert out["flagged"] == []  # the probes earn nothing on the fixed game
    assert out["before"] == out["after"] == 6 and out["before_masked"] == 0
    assert out["before_tokens"] and out["after_tokens"]  # token ids on every record the local server made
    assert len(out["logged"]) == 3 and out["tool_calls"] > 0
    assert out["training"] == out["file_lines"] == 12  # 3 steps x 4 rollouts, each a record in the file
    assert out["steps_on_records"] == [0, 1, 2]
    assert out["rl_lines"] == out["training"]
    assert out["open_sessions"] == 0 and out["server_sessions"] == 0
    assert out["panel"] == [12, 12, True] and out["curve_drawn"] is True  # the live panel and the redrawn curve (a PNG)
