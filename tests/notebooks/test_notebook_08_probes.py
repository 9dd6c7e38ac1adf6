"""Notebook 08 (reward probes) executed in a real kernel; the checks live here (a probe cell)."""

from gymlab.probes import BUILTIN_PROBES
from gymlab.probes.policies import run_names
from tests.notebooks.kernel import run_notebook

PROBE = """{
    "flagged_before": report.flagged,
    "spray_before": report.cell("answer_spray").mean_reward,
    "real_before": report.cell("answer_spray").real_reward,
    "spray_episode_reward": spray[0].reward,
    "flagged_after": fixed.flagged,
    "hits_after": fixed.hits,
    "spray_after": fixed.cell("answer_spray").mean_reward,
    "real_after": fixed.cell("answer_spray").real_reward,
    "mine_probes": list(mine.rollouts),
    "mine_flagged": mine.flagged,
    "html_has_flag": "gl-flag" in report._repr_html_(),
    "shortcuts": list(report.shortcuts()),
    "graded_flagged": graded.flagged,
    "refusal_reason": graded.reasons()["refusal"],
    "refusal_components": graded.components("refusal"),
}"""


def test_08_reward_probes():
    out, _ = run_notebook("08_reward_probes.ipynb", PROBE)
    # the hackable verify: the answer sprays earn what the real policy earns, on every task
    assert out["flagged_before"] == ["answer_spray", "short_answer_spray", "answer_aware_spray"]
    assert out["html_has_flag"] is True and "answer-aware spray" in out["shortcuts"]
    assert out["spray_before"] == out["real_before"] == out["spray_episode_reward"] == 1.0
    # fixed: no probe earns reward, the real policy still does
    assert out["flagged_after"] == [] and out["hits_after"] == []
    assert out["spray_after"] == 0.0 and out["real_after"] == 1.0
    # a rubric: the flag names the component that paid
    assert "refusal" in out["graded_flagged"] and out["refusal_components"] == {"brief": 1.0, "correct": 0.0}
    assert out["refusal_reason"].endswith(
        "paid by the component brief (mean value 1.00); a component's value is before its weight, not the reward."
    )
    # a user's own probe runs beside the built-in ones
    assert out["mine_probes"] == [*run_names(BUILTIN_PROBES), "powers_of_ten"]
    assert out["mine_flagged"] == []
