"""Notebook 10 (environments you did not write) executed in a real kernel; the checks live here."""

import pytest

from tests.notebooks.kernel import run_notebook

pytest.importorskip("reasoning_gym")
pytest.importorskip("textarena")

PROBE = """{
    "by_hand": ep.reward,
    "rewards": sorted({r.reward for r in rollouts}),
    "episodes": len(rollouts),
    "masked": sum(r.mask_sample for r in rollouts),
    "flagged": report.flagged,
    "spray": report.cell("spray_in_tags").mean_reward,
    "real": report.cell("spray_in_tags").real_reward,
    "first_move": step.info["moves"],
    "games": [[r.reward, r.terminated, r.steps[-1].info["rewards"]] for r in games],
    "rewarded": sum(r.reward == 1.0 for r in rollouts),
    "sft": len(sft.read_text().splitlines()),
    "rl": len(rl.read_text().splitlines()),
    "sessions_left": len(board.server.session_state),
}"""


def test_10_environments_you_did_not_write():
    out, outputs = run_notebook("10_environments_you_did_not_write.ipynb", PROBE)
    assert out["by_hand"] == 1.0
    assert out["episodes"] == 16 and out["masked"] == 0 and out["rewards"] == [0.0, 1.0]
    assert out["flagged"] == ["spray_in_tags"] and 0 < out["spray"] < 0.01
    assert out["first_move"][0] == {"player": 0, "action": "[4]"} and out["first_move"][1]["player"] == 1
    assert len(out["games"]) == 4
    for reward, terminated, rewards in out["games"]:
        assert terminated and reward == rewards["0"] and sum(rewards.values()) == 0
    assert out["sft"] == out["rewarded"] > 0 and out["rl"] > 0, out
    assert out["sessions_left"] == 1  # the hand-played match is still open: it has not ended
