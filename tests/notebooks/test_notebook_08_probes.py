"""Notebook 08 (reward probes) executed in a real kernel; the checks live here (a probe cell)."""

from gymlab.probes import BUILTIN_PROBES
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
}"""


def test_08_reward_probes():
    out, _ = run_notebook("08_reward_probes.ipynb", PROBE)
    # the hackable verify: the answer spray earns what the real policy earns, on every task
    assert out["flagged_before"] == ["answer_spray"] and out["html_has_flag"] is True
    assert out["spray_before"] == out["real_before"] == out["spray_episode_reward"] == 1.0
    # fixed: no probe earns reward, the real policy still does
    assert out["flagged_after"] == [] and out["hits_after"] == []
    assert out["spray_after"] == 0.0 and out["real_after"] == 1.0
    # a user's own probe runs beside the built-in ones
    assert out["mine_probes"] == [*BUILTIN_PROBES, "powers_of_ten"]
    assert out["mine_flagged"] == []
