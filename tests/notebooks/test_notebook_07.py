"""Notebook 07 (reward design) executed in a real kernel; the checks live here (a probe cell)."""

import pytest

from tests.notebooks.kernel import read, run_notebook

PROBE = """{
    "episodes": len(rollouts),
    "components": list(rollouts[0].reward_components),
    "reward_is_weighted_sum": all(
        abs(r.reward - (0.8 * r.reward_components["correct"] + 0.2 * r.reward_components["concise"])) < 1e-9
        for r in rollouts
    ),
    "episode_columns": [c for c in rollouts.episodes.columns if c.startswith("reward_")],
    "step_columns": [c for c in rollouts.steps.columns if c.startswith("reward_")],
    "verdict": rollouts[0].judgements[0]["verdict"],
    "task_means": prof.tasks["mean"].round(6).tolist(),
    "pass_at_2": prof.tasks["pass@2"].round(6).tolist(),
    "always_0": prof.summary["always_0"],
    "always_1": prof.summary["always_1"],
    "nemo_files": sorted(p.name for p in out.iterdir()),
    "old_task_means": compare["old_reward"].round(6).tolist(),
    "new_task_means": compare["new_reward"].round(6).tolist(),
    "judge_failure": failed.failure_kind,
    "judge_failure_masked": failed.mask_sample,
    "judge_failure_components": failed.reward_components,
}"""


def test_07_reward_design():
    book = read("07_reward_design.ipynb")
    assert book.cells[-1].cell_type == "markdown" and book.cells[-1].source.startswith("## Probe the reward")
    out, _ = run_notebook("07_reward_design.ipynb", PROBE)
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
