"""Reward profiles against hand-computed figures and against NeMo Gym 0.7.0's own profiler output."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest

from gymlab import Rollouts
from gymlab.cli import main as cli
from gymlab.jsonl import iter_jsonl
from gymlab.rewards.nemo_profile import profile_paths
from gymlab.rewards.stats import majority_at_k, pass_at_k, t_quantile

INTEROP = Path(__file__).resolve().parents[1] / "data" / "nemo_gym"  # NeMo Gym 0.7.0's own files, verbatim
NEMO = INTEROP / "nemo_gym_0.7.0_rollouts.jsonl"


def record(task, repeat, reward, masked=False, kind=None, components=None):
    return {
        "responses_create_params": {"input": "q"},
        "response": {
            "output": [],
            "usage": {"input_tokens": 3, "output_tokens": 2 + repeat, "total_tokens": 5 + repeat},
        },
        "reward": reward,
        "mask_sample": masked,
        "failure_kind": kind,
        "reward_components": components,
        "_ng_task_index": task,
        "_ng_rollout_index": repeat,
        "agent_ref": {"name": "a"},
    }


@pytest.fixture
def rollouts():
    task0 = [1.0, 0.0, 1.0, 0.0, 0.0]
    return Rollouts(
        [record(0, i, r, components={"c": r, "d": 0.5}) for i, r in enumerate(task0)]
        + [record(0, 5, 0.0, masked=True, kind="judge_failed", components={"c": None, "d": 0.5})]
        + [record(0, 6, 0.0, masked=True)]  # the environment's own mask: masked, not failed
        + [record(1, i, 0.0) for i in range(3)]
        + [record(2, i, 1.0) for i in range(3)]
    )


def brute_pass_at_k(values, k):
    """pass@k by enumerating every k-subset: the fraction with at least one success."""
    subsets = list(itertools.combinations(values, k))
    return sum(any(v >= 1.0 for v in s) for s in subsets) / len(subsets)


def test_unbiased_pass_at_k_is_the_closed_form_and_the_subset_average():
    for n in range(1, 9):
        for c in range(n + 1):
            values = [1.0] * c + [0.0] * (n - c)
            for k in range(1, n + 1):
                closed = 1 - math.comb(n - c, k) / math.comb(n, k)
                assert pass_at_k(n, c, k) == pytest.approx(closed) == pytest.approx(brute_pass_at_k(values, k))
                subsets = list(itertools.combinations(values, k))
                majority = sum(1.0 if 2 * sum(s) > k else 0.5 if 2 * sum(s) == k else 0.0 for s in subsets)
                assert majority_at_k(n, c, k) == pytest.approx(majority / len(subsets))


def test_profile_against_hand_computed_figures(rollouts):
    p = rollouts.profile()
    t = p.tasks.set_index("task")
    assert p.max_k == 5
    row = t.loc[0]
    assert (row["episodes"], row["scored"], row["masked"], row["failed"]) == (7, 5, 2, 1)
    assert row["mean"] == pytest.approx(0.4)
    assert row["std"] == pytest.approx(math.sqrt((2 * 0.6**2 + 3 * 0.4**2) / 4))  # sample std, as NeMo Gym
    assert (row["min"], row["median"], row["max"]) == (0.0, 0.0, 1.0)
    assert row["pass@1"] == pytest.approx(0.4)
    assert row["pass@2"] == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert row["pass@3"] == pytest.approx(1 - 1 / 10)  # 1 - C(3,3)/C(5,3)
    assert row["pass@4"] == row["pass@5"] == 1.0
    assert row["majority@1"] == pytest.approx(0.4)
    assert row["majority@3"] == pytest.approx(3 / 10)  # both successes drawn: C(2,2)C(3,1)/C(5,3)
    assert not row["always_0"] and not row["always_1"]
    assert t.loc[1, "always_0"] and not t.loc[1, "always_1"] and t.loc[1, "pass@3"] == 0.0
    assert t.loc[2, "always_1"] and math.isnan(t.loc[2, "pass@4"])  # only 3 repeats
    s = p.summary
    assert (s["tasks"], s["episodes"], s["scored"], s["masked"], s["failed"]) == (3, 13, 11, 2, 1)
    assert s["mean_reward"] == pytest.approx(5 / 11)
    assert s["pass@2"] == pytest.approx((0.7 + 0.0 + 1.0) / 3)
    assert s["always_0"] == [1] and s["always_1"] == [2] and p.flagged["task"].tolist() == [1, 2]
    c = p.components.set_index(["task", "component"])
    assert c.loc[(0, "c"), "mean"] == pytest.approx(0.4) and c.loc[(0, "c"), "missing"] == 1
    assert c.loc[(0, "d"), "n"] == 6 and c.loc[(0, "d"), "std"] == 0.0
    ax = p.plot()
    assert sum(patch.get_height() for patch in ax.patches) == 3  # one count per task


def test_profile_matches_the_nemo_gym_profiler(tmp_path):
    rollouts = Rollouts.load(NEMO)
    inputs = [row for _, row in iter_jsonl(INTEROP / "nemo_gym_0.7.0_materialized_inputs.jsonl")]
    expected = [
        [json.loads(line) for line in (INTEROP / "nemo_gym_0.7.0_rollouts_reward_profiling.jsonl").open()],
        json.loads((INTEROP / "nemo_gym_0.7.0_rollouts_agent_metrics.json").read_text()),
        json.loads((INTEROP / "nemo_gym_0.7.0_rollouts_repeat_level_metrics.json").read_text()),
    ]
    p = rollouts.profile()
    assert list(p.nemo(inputs)) == expected
    # the per-task table says the same as NeMo's per-task rows, for the fields both have
    (nemo_task,) = expected[0]
    row = p.tasks.iloc[0]
    assert row["task"] == nemo_task["_ng_task_index"]
    for stat in ("mean", "std", "min", "median", "max"):
        assert row[stat] == nemo_task[f"{stat}/reward"]
    assert row["scored"] == nemo_task["num_rollouts"]
    # `gymlab profile FILE --nemo` writes the same three files
    copy = tmp_path / NEMO.name
    copy.write_bytes(NEMO.read_bytes())
    inputs_path = INTEROP / "nemo_gym_0.7.0_materialized_inputs.jsonl"
    assert cli(["profile", str(copy), "--nemo", "--inputs", str(inputs_path), "--plot", str(tmp_path / "m.png")]) == 0
    tasks_path, agents_path, repeats_path = profile_paths(copy)
    assert [json.loads(line) for line in tasks_path.open()] == expected[0]
    assert json.loads(agents_path.read_text()) == expected[1]
    assert json.loads(repeats_path.read_text()) == expected[2]
    assert (tmp_path / "m.png").stat().st_size > 0


def test_nemo_files_of_gymlab_records_drop_masked_records_with_their_rows(rollouts):
    tasks, agents, repeats = rollouts.profile().nemo()
    first = tasks[0]  # NeMo Gym's view: a masked rollout is neither measured nor missing
    assert first["num_rollouts"] == 5 and first["expected_num_rollouts"] == 5 and first["missing_num_rollouts"] == 0
    (agent,) = agents
    assert (agent["coverage/measured_rollouts"], agent["coverage/masked_rollouts"]) == (11, 2)
    assert (agent["coverage/measured_tasks"], agent["coverage/fully_masked_tasks"]) == (3, 0)


def test_nemo_files_of_gymlab_records_can_count_masked_records_as_missing(rollouts):
    tasks, agents, repeats = rollouts.profile().nemo(masked_as_missing=True)
    first = tasks[0]
    assert first["num_rollouts"] == 5 and first["expected_num_rollouts"] == 7 and first["missing_num_rollouts"] == 2
    assert first["mean/reward"] == pytest.approx(0.4) and first["std/reward"] == pytest.approx(math.sqrt(0.3))
    assert [i["rollout_id"] for i in first["rollout_infos"]] == ["0:0", "0:1", "0:2", "0:3", "0:4"]
    (agent,) = agents
    assert agent["mean/reward"] == pytest.approx(5 / 11)
    # repeat 0..2 hold three tasks, repeats 3 and 4 only task 0
    assert [(r["_ng_rollout_index"], r["sample_count"], r["missing_count"]) for r in repeats] == [
        (0, 3, 0),
        (1, 3, 0),
        (2, 3, 0),
        (3, 1, 2),
        (4, 1, 2),
    ]
    per_repeat = [r["mean/reward"] for r in repeats]
    assert agent["mean_across_repeats/mean/reward"] == pytest.approx(sum(per_repeat) / 5)
    lo, hi = agent["ci_low_95_across_repeats/mean/reward"], agent["ci_high_95_across_repeats/mean/reward"]
    se = agent["se_across_repeats/mean/reward"]
    assert hi - lo == pytest.approx(2 * 2.7764451051977987 * se)  # t(0.975, df=4)


@pytest.mark.parametrize(
    ("df", "t"),
    [(1, 12.706204736174704), (2, 4.302652729749464), (3, 3.1824463052837095), (4, 2.7764451051977943)]
    + [(30, 2.0422724563012383), (10000, 1.9602012398906262)],  # t(0.975, df) to 16 digits (an exact reference)
)
def test_t_quantile_series(df, t):
    assert t_quantile(0.975, df) == pytest.approx(t, rel=1e-12)


def _same(mine, nemo, where=""):
    """Equal field sets at every level and equal values (the 95 % interval bounds to 1e-12: gymlab's
    Student t quantile is its own, not SciPy's); returns how many values were compared."""
    if isinstance(nemo, dict):
        assert isinstance(mine, dict) and set(mine) == set(nemo), (where, set(mine) ^ set(nemo))
        return sum(_same(mine[k], nemo[k], f"{where}.{k}") for k in nemo)
    if isinstance(nemo, list):
        assert isinstance(mine, list) and len(mine) == len(nemo), where
        return sum(_same(a, b, f"{where}[{i}]") for i, (a, b) in enumerate(zip(mine, nemo)))
    if "ci_" in where.rsplit(".", 1)[-1]:
        assert mine == pytest.approx(nemo, rel=1e-12, abs=1e-15), where
    else:
        assert mine == nemo and type(mine) is type(nemo) or (mine == nemo and isinstance(nemo, float)), where
    return 1


def test_profile_nemo_writes_every_field_of_nemo_gyms_profiler_on_masked_runs(tmp_path):
    """A gymlab run (counter with ``exact``/``distance`` verify fields, and calculator) with a failed
    verification, a fully masked task and a failed episode, profiled by NeMo Gym 0.7.0's own
    ``gym eval profile`` (its files are in tests/data/nemo_gym, ``make_profile_fixture.py``)."""
    rollouts = tmp_path / "profile_rollouts.jsonl"
    rollouts.write_bytes((INTEROP / rollouts.name).read_bytes())
    inputs = INTEROP / "profile_inputs.jsonl"
    assert cli(["profile", str(rollouts), "--nemo", "--inputs", str(inputs)]) == 0
    compared = 0
    for mine, nemo in zip(profile_paths(rollouts), profile_paths(INTEROP / rollouts.name)):
        if nemo.suffix == ".jsonl":
            compared += _same([json.loads(x) for x in mine.open()], [json.loads(x) for x in nemo.open()], mine.name)
        else:
            compared += _same(json.loads(mine.read_text()), json.loads(nemo.read_text()), mine.name)
    assert compared > 1500  # every value of the three files
    agents = {a["agent_ref"]["name"]: a for a in json.loads(profile_paths(rollouts)[1].read_text())}
    assert "mean/exact" in agents["counter_agent"] and "mean_across_repeats/mean/distance" in agents["counter_agent"]
    assert agents["counter_agent"]["coverage/fully_masked_tasks"] == 1
    assert agents["calculator_simple_agent"]["coverage/masked_rollouts"] == 1
    tasks = [json.loads(x) for x in profile_paths(rollouts)[0].open()]
    assert 0 not in [t["_ng_task_index"] for t in tasks]  # every rollout of task 0 was masked


def test_profile_nemo_refuses_records_without_an_input_row(tmp_path):
    rows = [row for _, row in iter_jsonl(INTEROP / "profile_inputs.jsonl")][1:]
    records = Rollouts.load(INTEROP / "profile_rollouts.jsonl")
    with pytest.raises(ValueError, match=r"1 record\(s\) have no input row; first \(task, repeat\) keys: \[\(0, 0\)\]"):
        records.profile().nemo(rows)


def test_every_zero_variance_task_is_flagged_with_a_sentence_why(tmp_path, capsys):
    """Std 0 at 0.8 or 0.2 gives group-relative RL no signal, as much as always 0 or always 1 does."""
    rewards = {0: [0.8, 0.8, 0.8], 1: [0.2, 0.2], 2: [0.0, 0.0], 3: [1.0, 1.0], 4: [0.2, 0.8], 5: [0.5]}
    rollouts = Rollouts([record(t, i, r) for t, rs in rewards.items() for i, r in enumerate(rs)])
    p = rollouts.profile()
    t = p.tasks.set_index("task")
    assert t["zero_variance"].tolist() == [True, True, True, True, False, False]  # one episode: no group at all
    assert p.flagged["task"].tolist() == [0, 1, 2, 3] and p.summary["zero_variance"] == [0, 1, 2, 3]
    flags = p.flags()
    assert list(flags) == [0, 1, 2, 3]
    assert flags[0].startswith("all 3 scored episodes scored 0.8 (std 0): every advantage") and "0.2" in flags[1]
    assert "scored 0:" in flags[2] and "succeeded" in flags[3]
    assert all(f.count(". ") == 0 and f.endswith(".") for f in flags.values())  # one sentence each
    assert t.loc[4, "why"] == "" and t.loc[5, "why"] == ""
    assert "task 0: all 3 scored episodes scored 0.8" in p._repr_html_() and "4 with no variance" in p._repr_html_()
    path = tmp_path / "r.jsonl"
    rollouts.save(path)
    assert cli(["profile", str(path)]) == 0
    out = capsys.readouterr().out
    assert "flagged task 1: all 2 scored episodes scored 0.2 (std 0)" in out and "flagged task 4" not in out
