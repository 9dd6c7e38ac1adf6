"""Plots on really collected rollouts: each returns a Figure with the expected artists, and accepts ax=."""

import matplotlib

matplotlib.use("Agg")

import pytest  # noqa: E402
from matplotlib.collections import PolyCollection  # noqa: E402
from matplotlib.container import BarContainer  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from gymlab import Lab  # noqa: E402
from gymlab.examples import example_rows, load_environment  # noqa: E402
from gymlab.lab import plots  # noqa: E402


@pytest.fixture(scope="module")
def runs():
    """Blackjack with two policies (the rule-based one and 'always stand'), three repeats; one failed episode."""
    blackjack = load_environment("blackjack")
    with Lab() as lab:
        env = lab.serve(blackjack.BlackjackEnv)
        rows = example_rows("blackjack")

        def always_stand(request):
            if "total 10" in request.input_items()[-1].text:
                raise RuntimeError("the model server is down")
            return "stand"

        rule = lab.serve_agent(
            "gymnasium_agent",
            name="rule_agent",
            resources=env,
            model=lab.serve_model(blackjack.policy, name="rule_policy"),
        )
        stand = lab.serve_agent(
            "gymnasium_agent",
            name="stand_agent",
            resources=env,
            model=lab.serve_model(always_stand, name="stand_policy"),
        )
        yield {"rule": lab.run_many(rule, rows, repeats=3), "stand": lab.run_many(stand, rows, repeats=3)}


def _markers(ax, marker):
    return [line for line in ax.get_lines() if line.get_marker() == marker]


def test_reward_curve_has_points_rolling_mean_band_and_marks_failures(runs):
    episodes = runs["stand"].episodes
    n_failed = int(episodes["failure_kind"].notna().sum())
    assert n_failed and n_failed % 3 == 0  # every repeat of each task that starts at 10
    fig = plots.reward_curve(episodes, window=5)
    assert isinstance(fig, Figure)
    (ax,) = fig.axes
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["reward", "rolling mean (5)", "+-1 std", "failed"]
    assert any(isinstance(c, PolyCollection) for c in ax.collections)  # the band
    (failed,) = [line for line in _markers(ax, "x") if line.get_label() == "failed"]
    assert len(failed.get_xdata()) == n_failed
    (mean,) = [line for line in ax.get_lines() if line.get_label().startswith("rolling mean")]
    assert len(mean.get_xdata()) == len(episodes) - n_failed  # failures stay out of the mean


def test_step_rewards_bars_and_cumulative_lines(runs):
    rollouts = runs["rule"]
    fig = plots.step_rewards(rollouts.steps, episodes=rollouts.episodes, max_episodes=4)
    (ax,) = fig.axes
    lines = [line for line in ax.get_lines() if line.get_label().startswith("episode")]
    assert len(lines) == 4
    steps = rollouts.steps
    for line in lines:
        key = int(line.get_label().split()[1])
        assert list(line.get_ydata()) == pytest.approx(list(steps.loc[steps["episode"] == key, "cumulative_reward"]))
    bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    assert sum(len(b) for b in bars) == steps["episode"].isin(range(4)).sum()


def test_reward_distribution_per_task_and_per_environment(runs):
    episodes = runs["rule"].episodes
    fig = plots.reward_distribution(episodes, by="task")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == [str(t) for t in sorted(set(episodes["task"]))]
    fig = plots.reward_distribution(episodes, by="environment")
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["blackjack_env"]
    with pytest.raises(KeyError, match="no column 'nope'"):
        plots.reward_distribution(episodes, by="nope")


def test_compare_runs_side_by_side_with_ax(runs):
    from matplotlib.figure import Figure as F

    fig = F()
    ax = fig.add_subplot()
    out = plots.compare_runs({"rule": runs["rule"].episodes, "stand": runs["stand"].episodes}, by="task", ax=ax)
    assert out is fig
    bars = [c for c in ax.containers if isinstance(c, BarContainer)]
    assert len(bars) == 2 and all(len(b) == len(example_rows("blackjack")) for b in bars)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["rule", "stand"]
    assert any("masked/failed" in t.get_text() for t in ax.texts)
    fig.savefig(__import__("io").BytesIO(), format="png")  # renders


def test_plots_never_touch_pyplot(runs):
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    plots.reward_curve(runs["rule"].episodes)
    assert plt.get_fignums() == before
