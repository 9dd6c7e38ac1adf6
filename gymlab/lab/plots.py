"""Reward plots from frames (filter the frame first to plot a subset).

Each function takes frames from ``gymlab.lab.frames``, draws on ``ax`` (or a new figure), returns the
Figure and never calls ``show()``. Masked episodes are drawn as grey crosses and failed ones (a
``failure_kind``) as red crosses; both stay out of rolling means and distributions.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

MASKED_STYLE = {"marker": "x", "color": "0.55", "linestyle": "none", "label": "masked"}
FAILED_STYLE = {"marker": "x", "color": "tab:red", "linestyle": "none", "label": "failed"}


def _axes(ax: Any, figsize=(7, 4)):
    if ax is not None:
        return ax.figure, ax
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    return fig, fig.add_subplot()


def _kept(episodes):
    """Episodes that count toward reward statistics (neither masked nor failed)."""
    return episodes[~episodes["mask_sample"] & episodes["failure_kind"].isna()]


def _mark_excluded(ax, episodes, x, y) -> None:
    failed = episodes["failure_kind"].notna()
    masked = episodes["mask_sample"] & ~failed
    if masked.any():
        ax.plot(x[masked], y[masked], **MASKED_STYLE)
    if failed.any():
        ax.plot(x[failed], y[failed], **FAILED_STYLE)


def reward_curve(episodes, *, window: int = 20, ax: Any = None, label: str = "reward"):
    """Reward per episode in run order, a rolling mean over ``window`` kept episodes and a +-1 std band."""
    fig, ax = _axes(ax)
    x = episodes["episode"].to_numpy()
    y = episodes["reward"].to_numpy()
    kept = _kept(episodes)
    ax.plot(kept["episode"], kept["reward"], "o", markersize=3, alpha=0.4, label=label)
    rolling = kept["reward"].rolling(window, min_periods=1)
    mean, std = rolling.mean(), rolling.std().fillna(0.0)
    ax.plot(kept["episode"], mean, "-", linewidth=2, label=f"rolling mean ({window})")
    ax.fill_between(kept["episode"], mean - std, mean + std, alpha=0.2, label="+-1 std")
    _mark_excluded(ax, episodes, x, y)
    ax.set_xlabel("episode")
    ax.set_ylabel("reward")
    ax.legend(loc="best", fontsize="small")
    return fig


def step_rewards(steps, *, episodes: Any = None, ax: Any = None, max_episodes: int = 20):
    """Within each episode: per-step reward (bars) and cumulative reward (a line per episode)."""
    fig, ax = _axes(ax)
    keys = list(dict.fromkeys(steps["episode"].tolist()))[:max_episodes]
    shown = steps[steps["episode"].isin(keys)]
    excluded = set()
    if episodes is not None:
        excluded = set(episodes.loc[episodes["mask_sample"] | episodes["failure_kind"].notna(), "episode"])
    width = 0.8 / max(1, len(keys))
    for n, (key, group) in enumerate(shown.groupby("episode", sort=False)):
        style = {"linestyle": ":", "color": "0.55"} if key in excluded else {}
        (line,) = ax.plot(group["step"], group["cumulative_reward"], marker=".", label=f"episode {key}", **style)
        ax.bar(
            group["step"] + (n - len(keys) / 2) * width,
            group["reward"],
            width=width,
            color=line.get_color(),
            alpha=0.35,
        )
    ax.axhline(0.0, color="0.8", linewidth=0.8)
    ax.set_xlabel("step")
    ax.set_ylabel("reward (bars: per step, lines: cumulative)")
    if len(keys) <= 10:
        ax.legend(loc="best", fontsize="small")
    return fig


def reward_distribution(episodes, *, by: str = "task", ax: Any = None):
    """Box plot of kept rewards per ``by`` group (``task``, ``environment``, ``model``...), points on top."""
    import numpy as np

    fig, ax = _axes(ax)
    if by not in episodes:
        raise KeyError(f"no column {by!r} to group by; the frame has {', '.join(map(str, episodes.columns))}")
    groups = [g for g in dict.fromkeys(episodes[by].dropna().tolist())]
    kept = _kept(episodes)
    data = [kept.loc[kept[by] == g, "reward"].to_numpy() for g in groups]
    positions = np.arange(1, len(groups) + 1)
    ax.boxplot(data, positions=positions, widths=0.6)
    rng = np.random.default_rng(0)
    for pos, values in zip(positions, data):
        ax.plot(pos + rng.uniform(-0.15, 0.15, len(values)), values, "o", markersize=3, alpha=0.5, color="tab:blue")
    position_of = dict(zip(groups, positions))
    x = episodes[by].map(position_of).astype("float64").to_numpy()
    _mark_excluded(ax, episodes, x, episodes["reward"].to_numpy())
    ax.set_xticks(positions, [str(g) for g in groups], rotation=30 if len(groups) > 6 else 0)
    ax.set_xlabel(by)
    ax.set_ylabel("reward")
    return fig


def compare_runs(runs: Mapping[str, Any], *, by: str | None = None, ax: Any = None):
    """Two or more runs side by side: mean kept reward per run (per ``by`` group when given), +-1 std.

    ``runs`` maps a run's label to its episodes frame, e.g. ``{"greedy": a.episodes, "random": b.episodes}``.
    """
    import numpy as np

    if len(runs) < 1:
        raise ValueError("compare_runs needs at least one run")
    fig, ax = _axes(ax)
    labels = list(runs)
    groups = (
        [None] if by is None else list(dict.fromkeys(g for frame in runs.values() for g in frame[by].dropna().tolist()))
    )
    width = 0.8 / len(labels)
    x = np.arange(len(groups))
    for n, label in enumerate(labels):
        kept = _kept(runs[label])
        means, stds = [], []
        for g in groups:
            values = kept["reward"] if g is None else kept.loc[kept[by] == g, "reward"]
            means.append(values.mean() if len(values) else np.nan)
            stds.append(values.std(ddof=0) if len(values) else 0.0)
        ax.bar(x + (n - (len(labels) - 1) / 2) * width, means, width=width, yerr=stds, capsize=3, label=label)
        excluded = len(runs[label]) - len(kept)
        if excluded:
            ax.annotate(
                f"{excluded} masked/failed",
                (x[-1] + (n - (len(labels) - 1) / 2) * width, 0),
                fontsize="x-small",
                color="tab:red",
                ha="center",
                va="bottom",
            )
    ax.set_xticks(x, ["all episodes"] if by is None else [str(g) for g in groups])
    ax.set_ylabel("mean reward")
    if by is not None:
        ax.set_xlabel(by)
    ax.legend(loc="best", fontsize="small")
    return fig
