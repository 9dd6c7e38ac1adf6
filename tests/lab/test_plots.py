"""Plots on really collected rollouts: each returns a Figure with the expected artists, and accepts ax=."""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
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


def _title(fig):
    return fig.axes[0].get_title()


def test_every_plot_says_what_it_draws_and_over_how_many_episodes(runs):
    rollouts = runs["stand"]
    episodes, steps = rollouts.episodes, rollouts.steps
    n, left_out = len(episodes), int(episodes["failure_kind"].notna().sum())
    figures = {
        "curve": plots.reward_curve(episodes),
        "steps": plots.step_rewards(steps, episodes=episodes),
        "heatmap": plots.reward_heatmap(steps, episodes=episodes),
        "distribution": plots.reward_distribution(episodes),
        "compare": plots.compare_runs({"rule": runs["rule"].episodes, "stand": episodes}),
    }
    for name, fig in figures.items():
        ax = fig.axes[0]
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel(), name
    n_tasks = len(example_rows("blackjack"))  # the default window: one repeat's worth of episodes
    assert _title(figures["curve"]) == (
        f"Reward per episode in repeat order, rolling mean of {n_tasks} (one repeat) "
        f"({n} episodes, {left_out} left out (masked or failed))"
    )
    band = "95% interval of the mean"  # blackjack pays -1, 0 or 1: not a 0/1 reward
    assert _title(figures["steps"]) == f"Mean reward by step over {n - left_out} episodes (bands: {band})"
    assert _title(figures["heatmap"]) == (
        f"Reward by episode and step, {n - left_out} episodes (grey: 0 before the last step)"
    )
    assert _title(figures["distribution"]).startswith(f"Reward by task ({n} episodes")
    assert "rule: 18, stand: 18" in _title(figures["compare"])


def test_reward_curve_follows_completion_order_and_marks_failures(runs):
    rollouts = runs["stand"]
    episodes = rollouts.episodes
    assert sorted(episodes["completed"]) == list(range(len(episodes)))  # run_many knows the order of finishing
    n_failed = int(episodes["failure_kind"].notna().sum())
    assert n_failed and n_failed % 3 == 0  # every repeat of each task that starts at 10
    fig = plots.reward_curve(episodes, window=5, order="completed")
    assert isinstance(fig, Figure)
    (ax,) = fig.axes
    assert ax.get_xlabel() == "episode, in the order it finished"
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["reward", "rolling mean (5)", "95% interval of the mean", "failed"]
    assert any(isinstance(c, PolyCollection) for c in ax.collections)  # the band
    (failed,) = [line for line in _markers(ax, "x") if line.get_label() == "failed"]
    assert len(failed.get_xdata()) == n_failed
    (points,) = [line for line in ax.get_lines() if line.get_label() == "reward"]
    by_completion = episodes.sort_values("completed")
    kept = by_completion[by_completion["failure_kind"].isna()]
    assert list(points.get_ydata()) == list(kept["reward"])  # drawn in the order episodes finished
    (mean,) = [line for line in ax.get_lines() if line.get_label().startswith("rolling mean")]
    assert len(mean.get_xdata()) == len(episodes) - n_failed  # failures stay out of the mean


def test_reward_curve_goes_repeat_by_repeat_also_for_a_loaded_run(runs, tmp_path):
    from gymlab.lab.runs import Rollouts

    loaded = Rollouts.load(runs["rule"].save(tmp_path / "rule.jsonl"))
    episodes = loaded.episodes
    assert "completed" not in episodes  # a file does not keep the order of finishing
    fig = plots.reward_curve(episodes, window=4)
    ax = fig.axes[0]
    assert ax.get_xlabel() == "episode, repeat by repeat (every task once per repeat)"
    (points,) = [line for line in ax.get_lines() if line.get_label() == "reward"]
    assert list(points.get_ydata()) == list(episodes.sort_values(["repeat", "task"])["reward"])
    n_tasks = len(example_rows("blackjack"))
    boundaries = [line.get_xdata()[0] for line in ax.get_lines() if line.get_linestyle() == ":"]
    assert boundaries == [k * n_tasks - 0.5 for k in (1, 2)]  # three repeats: two boundaries
    with pytest.raises(KeyError, match="completion order is known for runs of lab.run_many"):
        plots.reward_curve(episodes, order="completed")


def test_step_rewards_mean_by_step_with_a_band(runs):
    rollouts = runs["rule"]
    steps, episodes = rollouts.steps, rollouts.episodes
    fig = plots.step_rewards(steps, episodes=episodes)
    (ax,) = fig.axes
    (mean,) = [line for line in ax.get_lines() if line.get_label() == "mean reward at the episode's last step"]
    last = steps["step"] == steps.groupby("episode")["step"].transform("max")
    expected = steps[last].groupby("step")["reward"].mean()  # the outcomes, apart from the steps on the way
    assert list(mean.get_xdata()) == list(expected.index)
    assert list(mean.get_ydata()) == pytest.approx(list(expected))
    assert any(isinstance(c, PolyCollection) for c in ax.collections)  # the interval's band
    assert not [c for c in ax.containers if isinstance(c, BarContainer)]  # no per-episode bars


def test_reward_heatmap_is_episode_by_step(runs):
    steps, episodes = runs["rule"].steps, runs["rule"].episodes
    fig = plots.reward_heatmap(steps, episodes=episodes, max_episodes=5)
    colour, _grey = fig.axes[0].get_images()
    grid = np.ma.filled(colour.get_array().astype("float64"), np.nan)
    shown = sorted(episodes.sort_values(["repeat", "task"])["episode"].tolist()[:5])  # tasks 0-4, not task 0 only
    assert grid.shape == (5, steps.loc[steps["episode"].isin(shown), "step"].max() + 1)
    for row, episode in zip(grid, shown):
        own = steps[steps["episode"] == episode]
        assert row[len(own) - 1] == own["reward"].iloc[-1]  # the episode's last reward, in colour


def test_reward_distribution_draws_no_collapsed_box_for_deterministic_rows(runs):
    episodes = runs["rule"].episodes  # seeded decks, a rule-based policy: each task's repeats agree
    fig = plots.reward_distribution(episodes, by="task")
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == [str(t) for t in sorted(set(episodes["task"]))]
    assert not [line for line in ax.get_lines() if line.get_label() == "_nolegend_" and len(line.get_xdata()) == 2]
    assert "mean, 95% interval of the mean" in [t.get_text() for t in ax.get_legend().get_texts()]
    fig = plots.reward_distribution(episodes, by="environment")
    assert [t.get_text() for t in fig.axes[0].get_xticklabels()] == ["blackjack_env"]
    with pytest.raises(KeyError, match="no column 'nope'"):
        plots.reward_distribution(episodes, by="nope")


def test_reward_distribution_draws_a_box_where_rewards_vary(runs):
    import pandas as pd

    episodes = pd.concat([runs["rule"].episodes, runs["stand"].episodes]).assign(policy="both")
    fig = plots.reward_distribution(episodes, by="policy")
    whiskers = [line for line in fig.axes[0].get_lines() if len(line.get_xdata()) == 2]
    assert whiskers  # the pooled rewards vary (-1, 0, 1): a box is drawn


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
