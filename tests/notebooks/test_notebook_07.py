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
    "zero_variance": prof.summary["zero_variance"],
    "why": prof.flagged["why"].tolist(),
    "nemo_files": sorted(p.name for p in out.iterdir()),
    "old_task_means": compare["old_reward"].round(6).tolist(),
    "new_task_means": compare["new_reward"].round(6).tolist(),
    "judge_failure": failed.failure_kind,
    "judge_failure_masked": failed.mask_sample,
    "judge_failure_components": failed.reward_components,
    "draft_flagged": draft_report.flagged,
    "draft_reasons": draft_report.reasons(),
    "draft_components": {name: draft_report.components(name) for name in draft_report.flagged},
    "fixed_flagged": report.flagged,
    "fixed_hits": len(report.hits),
    "rubric": repr(rubric),
    "edited": repr(edited),
}"""


def test_07_reward_design():
    book = read("07_reward_design.ipynb")
    headings = [c.source.splitlines()[0] for c in book.cells if c.cell_type == "markdown"]
    assert headings.index("## Probe it before collecting") < headings.index("## Collect")  # probe, then collect
    assert book.cells[-1].source == "lab.close()"
    assert 'Component("concise", open_qa.concise, weight=0.2, gate="correct")' in "".join(c.source for c in book.cells)
    out, _ = run_notebook("07_reward_design.ipynb", PROBE)
    # the draft: brevity paid answers that were not even tried, and the lenient judge paid the sprays
    assert {"refusal", "verdict_injection", "short_answer_spray", "answer_aware_spray"} <= set(out["draft_flagged"])
    assert out["draft_reasons"]["refusal"] == (
        "refusal: it earned a mean reward of 0.20 (above 0), paid by the component concise (mean value 1.00)"
        "; a component's value is before its weight, not the reward."
    )
    assert out["draft_components"]["answer_aware_spray"] == {"correct": 1.0, "concise": 0.0}
    assert out["fixed_flagged"] == [] and out["fixed_hits"] == 0
    assert out["rubric"] == "<Rubric correct=0.8 (judge), concise=0.2 (if correct)>"
    assert out["edited"] == "<Rubric correct=0.5 (judge), concise=0.5 (if correct)>"
    assert out["episodes"] == 16
    assert out["components"] == ["correct", "concise"] and out["reward_is_weighted_sum"] is True
    assert out["episode_columns"] == out["step_columns"] == ["reward_correct", "reward_concise"]
    assert out["verdict"] == "CORRECT"
    # brief and right; long and right (0.8); right every other time; wrong, so brevity earns nothing
    assert out["task_means"] == pytest.approx([1.0, 0.8, 0.5, 0.0])
    assert out["pass_at_2"] == pytest.approx([1.0, 0.0, 1 - 1 / 6, 0.0])  # task 2: 1 - C(2,2)/C(4,2)
    assert out["always_0"] == [3] and out["always_1"] == [0] and out["zero_variance"] == [0, 1, 3]
    assert "scored 0.8 (std 0)" in out["why"][1] and "scored 0:" in out["why"][2]
    assert out["nemo_files"] == [
        "open_qa_rollouts.jsonl",
        "open_qa_rollouts_agent_metrics.json",
        "open_qa_rollouts_repeat_level_metrics.json",
        "open_qa_rollouts_reward_profiling.jsonl",
    ]
    assert out["old_task_means"] == pytest.approx(out["task_means"])
    assert out["new_task_means"] == pytest.approx([1.0, 0.5, 0.5, 0.0])
    assert out["judge_failure"] == "judge_unparseable" and out["judge_failure_masked"] is True
    assert out["judge_failure_components"] == {"correct": None, "concise": 1.0}
