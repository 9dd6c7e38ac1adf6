"""What the plots and summaries claim, checked on the data they draw (not pixels): intervals on the reward
range (declared, else [0, 1] for 0/1 rewards, never the observed one), steps on the way apart from the
outcome, no legend entry for nothing drawn, no "nan" for a mean, a live bar coloured by the failed share,
and figures a notebook kernel shows as an image with no ``%matplotlib`` magic."""

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402
from IPython.core.formatters import DisplayFormatter  # noqa: E402

from benchmarks.records import synthetic  # noqa: E402
from gymlab import Lab, environment, rows_from  # noqa: E402
from gymlab.lab import plots  # noqa: E402
from gymlab.lab.runs import Rollouts  # noqa: E402
from gymlab.lab.widgets import LivePanel  # noqa: E402

Z2 = plots.Z**2


def episodes(rewards, *, tasks=None, masked=()):
    n = len(rewards)
    return pd.DataFrame(
        {
            "episode": range(n),
            "task": tasks if tasks is not None else [0] * n,
            "repeat": range(n),
            "reward": rewards,
            "mask_sample": [i in masked for i in range(n)],
            "failure_kind": pd.Categorical(["model_error" if i in masked else None for i in range(n)]),
        }
    )


def error_bar(ax):
    """(means, lows, highs) of the plot's error bars."""
    (container,) = ax.containers
    means = container.lines[0].get_ydata()
    (segments,) = container.lines[2]
    ends = np.array([sorted(seg[:, 1]) for seg in segments.get_segments()])
    return np.asarray(means), ends[:, 0], ends[:, 1]


def test_three_successes_of_three_are_not_drawn_as_a_certainty():
    ax = plots.reward_distribution(episodes([1.0, 1.0, 1.0])).axes[0]
    means, lows, highs = error_bar(ax)
    assert means[0] == 1.0 and highs[0] == 1.0
    assert lows[0] == pytest.approx(3 / (3 + Z2)) and lows[0] < 0.45  # Wilson: 0.44-1.0, not 1.0-1.0
    assert ax.get_ylim()[0] < 0.45  # the axis shows it


def test_a_declared_range_bounds_the_interval_and_none_is_never_the_observed_one():
    class Blackjack:
        reward_range = (-1.0, 1.0)

    frame = episodes([1.0, 0.0], tasks=[0, 1])  # one episode a task: nothing is known of either mean
    _, lows, highs = error_bar(plots.reward_distribution(frame, reward_range=Blackjack).axes[0])
    assert list(lows) == [-1.0, -1.0] and list(highs) == [1.0, 1.0]  # the declared range, not [0, 1]
    assert plots.declared_range(Blackjack()) == (-1.0, 1.0)  # an instance declares it too
    # 0/1 rewards without a declaration: [0, 1] (Wilson), not the single observed value
    _, lows, highs = error_bar(plots.reward_distribution(frame).axes[0])
    assert lows[0] == pytest.approx(1 / (1 + Z2)) and highs[1] == pytest.approx(Z2 / (1 + Z2))
    # other rewards without a declaration: an open side is not drawn (never a bar ending at the one value seen)
    low, high = plots.interval([0.7], [np.nan], [1], **plots._scale([0.7]))
    assert np.isnan(low[0]) and np.isnan(high[0])
    with pytest.raises(ValueError, match="low < high"):
        plots.declared_range((1.0, 1.0))


def test_a_run_carries_its_environments_declared_range_to_the_plots():
    def verify(row: dict) -> float:
        return float(row["score"])

    scored = environment("Scored", verify=verify, fields={"score": float}, reward_range=(-1.0, 1.0))
    rows = rows_from(["a", "b"], score=[1.0, 0.0])
    with Lab() as lab:
        env = lab.serve(scored)
        agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(lambda request: "done"))
        run = lab.run_many(agent, rows)
    assert run.episodes.attrs["reward_range"] == (-1.0, 1.0) == run.steps.attrs["reward_range"]
    _, lows, highs = error_bar(plots.reward_distribution(run.episodes).axes[0])
    assert list(lows) == [-1.0, -1.0] and list(highs) == [1.0, 1.0]  # one episode a task: the declared range
    frame = run.episodes[run.episodes["task"] == 0]  # a filtered frame keeps it
    assert frame.attrs["reward_range"] == (-1.0, 1.0)


def steps_frame():
    """Three episodes: a tool call then the outcome (0, 1), two tool calls then 1, the outcome at once (0)."""
    rows = [(0, 0, 0.0), (0, 1, 0.0), (1, 0, 0.0), (1, 1, 0.0), (1, 2, 1.0), (2, 0, 0.0)]
    frame = pd.DataFrame(rows, columns=["episode", "step", "reward"])
    frame["cumulative_reward"] = frame.groupby("episode")["reward"].cumsum()
    return frame


def test_step_rewards_keep_the_outcome_apart_from_the_steps_on_the_way():
    ax = plots.step_rewards(steps_frame()).axes[0]
    lines = {line.get_label(): line for line in ax.get_lines()}
    on_the_way = lines["mean reward at a step on the way"]
    last = lines["mean reward at the episode's last step"]
    assert list(on_the_way.get_xdata()) == [0, 1] and list(on_the_way.get_ydata()) == [0.0, 0.0]  # calls pay nothing
    assert list(last.get_xdata()) == [0, 1, 2] and list(last.get_ydata()) == [0.0, 0.0, 1.0]  # the outcomes
    assert "bands: 95% Wilson interval" in ax.get_title()


def test_no_legend_entry_for_a_line_nothing_draws():
    frame = episodes([0.0, 1.0, 1.0], masked=(0, 1, 2))  # every episode failed: no reward to draw
    for fig in (plots.reward_curve(frame), plots.reward_distribution(frame)):
        labels = [t.get_text() for t in fig.axes[0].get_legend().get_texts()]
        assert labels == ["failed"], labels
    labels = [t.get_text() for t in plots.reward_curve(episodes([1.0, 0.0])).axes[0].get_legend().get_texts()]
    assert labels == ["reward", "rolling mean (20)", "95% Wilson interval"]


def test_a_mean_no_episode_has_is_said_not_printed_as_nan():
    records = [r.model_copy(update={"mask_sample": True, "failure_kind": "model_error"}) for r in synthetic(2, 2)]
    run = Rollouts(records)
    assert "nan" not in repr(run) and "no mean reward (no unmasked episode)" in repr(run)
    assert "nan" not in run._repr_html_() and "nan" not in repr(run.profile())
    assert "mean reward 1.000 over the unmasked" in repr(Rollouts(synthetic(2, 2)))


def test_the_live_bar_is_red_only_when_every_episode_failed():
    def finished(kept: int, failed: int) -> str:
        panel = LivePanel(kept + failed)
        for record in synthetic(kept, 1):
            panel.add(record)
        for _ in range(failed):
            panel.add_failure("model_error", "model")
        panel.finish()
        return panel.progress.bar_style

    assert finished(20, 0) == "success"
    assert finished(13, 7) == "warning"  # 35 % failed: the other 65 % were collected
    assert finished(0, 3) == "danger"


def test_a_plot_shows_as_an_image_with_no_magic():
    fig = plots.reward_curve(episodes([1.0, 0.0, 1.0]))
    bundle, _ = DisplayFormatter().format(fig)  # what a kernel sends when a cell's value is the figure
    assert bundle["image/png"].startswith(b"\x89PNG") and len(bundle["image/png"]) > 5000
    assert isinstance(fig, matplotlib.figure.Figure)
