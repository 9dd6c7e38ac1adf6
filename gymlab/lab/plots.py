"""Reward plots from frames (filter the frame first to plot a subset).

Each function takes frames from ``gymlab.lab.frames``, draws on ``ax`` (or a new figure), returns the
Figure and never calls ``show()``. Every plot has a title that says what is drawn and over how many
episodes, and labelled axes. Masked episodes are drawn as grey crosses and failed ones (a
``failure_kind``) as red crosses; both stay out of means, bands and distributions.

- ``reward_curve``: reward per episode repeat by repeat (or in the order episodes finished), with a
  rolling mean and band: not the "aabbcc" row order of a run, which draws task boundaries;
- ``step_rewards``: mean reward at each step with a +-1 std band; ``reward_heatmap``: episode x step;
- ``reward_distribution``: every episode's reward per group with the mean and spread (a box only
  where a group's rewards vary);
- ``compare_runs``: two or more runs side by side.
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


def _failed(episodes):
    import pandas as pd

    if "failure_kind" in episodes:
        return episodes["failure_kind"].notna()
    return pd.Series(False, index=episodes.index)


def _masked(episodes):
    import pandas as pd

    masked = episodes["mask_sample"] if "mask_sample" in episodes else pd.Series(False, index=episodes.index)
    return masked.astype(bool) & ~_failed(episodes)


def _excluded(episodes):
    return _masked(episodes) | _failed(episodes)


def _kept(episodes):
    """Episodes that count toward reward statistics (neither masked nor failed)."""
    return episodes[~_excluded(episodes)]


def _mark_excluded(ax, episodes, x, y) -> None:
    failed, masked = _failed(episodes).to_numpy(), _masked(episodes).to_numpy()
    if masked.any():
        ax.plot(x[masked], y[masked], **MASKED_STYLE)
    if failed.any():
        ax.plot(x[failed], y[failed], **FAILED_STYLE)


def _over(episodes) -> str:
    """``48 episodes`` or ``48 episodes, 3 left out (masked or failed)``."""
    n, left_out = len(episodes), int(_excluded(episodes).sum())
    text = f"{n} episode{'s' * (n != 1)}"
    return f"{text}, {left_out} left out (masked or failed)" if left_out else text


def _order(episodes, order: str):
    """(episodes sorted for the x axis, the axis label, the order's name)."""
    if order == "completed":
        if "completed" not in episodes or episodes["completed"].isna().any():
            raise KeyError(
                "no 'completed' column: completion order is known for runs of lab.run_many; use order='repeat'"
            )
        return episodes.sort_values("completed", kind="stable"), "episode, in the order it finished", "completion order"
    if order == "repeat":
        keys = [k for k in ("repeat", "task", "episode") if k in episodes]
        return (
            episodes.sort_values(keys, kind="stable"),
            "episode, repeat by repeat (every task once per repeat)",
            "repeat order",
        )
    raise ValueError(f"order must be 'repeat' or 'completed', got {order!r}")


def reward_curve(episodes, *, window: int | None = None, order: str = "repeat", ax: Any = None, label: str = "reward"):
    """Reward per episode with a rolling mean over ``window`` kept episodes and a +-1 std band.

    ``order="repeat"``: every task once per repeat, repeat after repeat (dotted lines between
    repeats), so the curve shows how repeats compare rather than where one task's block ends;
    ``order="completed"``: the order episodes finished (runs of ``lab.run_many`` know it).
    ``window`` defaults to the number of tasks (one repeat's worth), else 20.
    """
    import numpy as np

    fig, ax = _axes(ax)
    ordered, xlabel, name = _order(episodes, order)
    ordered = ordered.reset_index(drop=True)
    if window is None:
        n_tasks = ordered["task"].nunique() if "task" in ordered else 0
        window = n_tasks if n_tasks > 1 else 20
    x = np.arange(len(ordered))
    kept = _kept(ordered)
    ax.plot(x[kept.index], kept["reward"], "o", markersize=3, alpha=0.4, label=label)
    rolling = kept["reward"].rolling(window, min_periods=1)
    mean, std = rolling.mean(), rolling.std().fillna(0.0)
    ax.plot(x[kept.index], mean, "-", linewidth=2, label=f"rolling mean ({window})")
    ax.fill_between(x[kept.index], mean - std, mean + std, alpha=0.2, label="+-1 std")
    _mark_excluded(ax, ordered, x, ordered["reward"].to_numpy())
    if order == "repeat" and "repeat" in ordered and ordered["repeat"].nunique() > 1:
        repeats = ordered["repeat"].to_numpy(dtype="float64", na_value=np.nan)
        starts = np.flatnonzero(repeats[1:] != repeats[:-1]) + 1
        for start in starts:
            ax.axvline(start - 0.5, color="0.85", linewidth=0.8, linestyle=":")
    ax.set_title(f"Reward per episode in {name}, rolling mean of {window} ({_over(episodes)})")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("reward")
    ax.legend(loc="best", fontsize="small")
    return fig


def _kept_steps(steps, episodes):
    if episodes is None:
        return steps, len(set(steps["episode"]))
    kept = set(_kept(episodes)["episode"])
    return steps[steps["episode"].isin(kept)], len(kept)


def step_rewards(steps, *, episodes: Any = None, ax: Any = None, max_episodes: int | None = None):
    """Mean reward at each step over the episodes that reached it, with a +-1 std band, and the mean
    cumulative reward. ``episodes`` (the episodes frame) leaves masked and failed episodes out;
    ``max_episodes`` keeps the first that many episodes."""
    fig, ax = _axes(ax)
    kept, n = _kept_steps(steps, episodes)
    if max_episodes is not None:
        first = list(dict.fromkeys(kept["episode"].tolist()))[:max_episodes]
        kept, n = kept[kept["episode"].isin(first)], len(first)
    by_step = kept.groupby("step")
    mean, std, count = by_step["reward"].mean(), by_step["reward"].std().fillna(0.0), by_step["reward"].size()
    (line,) = ax.plot(mean.index, mean, "o-", label="mean reward at the step")
    ax.fill_between(mean.index, mean - std, mean + std, alpha=0.2, color=line.get_color(), label="+-1 std")
    cumulative = by_step["cumulative_reward"].mean() if "cumulative_reward" in kept else None
    if cumulative is not None:
        ax.plot(cumulative.index, cumulative, "--", color="0.4", label="mean cumulative reward")
    for step, k in count.items():
        if k < n:  # fewer episodes reached this step: say how many the mean is over
            ax.annotate(f"n={k}", (step, mean[step]), fontsize="x-small", xytext=(3, 3), textcoords="offset points")
    ax.axhline(0.0, color="0.8", linewidth=0.8)
    ax.set_title(f"Mean reward by step over {n} episode{'s' * (n != 1)} (band: +-1 std)")
    ax.set_xlabel("step (model turn or transition, from 0)")
    ax.set_ylabel("reward at the step")
    if len(mean):
        ax.set_xticks(mean.index)
        ax.margins(x=0.08)
    ax.legend(loc="best", fontsize="small")
    return fig


def reward_heatmap(steps, *, episodes: Any = None, ax: Any = None, max_episodes: int = 100):
    """Reward of every step of each episode (rows: episodes, columns: steps; blank: no such step)."""
    fig, ax = _axes(ax)
    kept, _ = _kept_steps(steps, episodes)
    shown = list(dict.fromkeys(kept["episode"].tolist()))[:max_episodes]
    grid = kept[kept["episode"].isin(shown)].pivot_table(index="episode", columns="step", values="reward")
    image = ax.imshow(grid.to_numpy(), aspect="auto", interpolation="nearest", cmap="RdYlGn")
    fig.colorbar(image, ax=ax, label="reward at the step")
    ax.set_title(f"Reward by episode and step ({len(grid)} episodes)")
    ax.set_xlabel("step")
    ax.set_ylabel("episode")
    ax.set_xticks(range(len(grid.columns)), [str(c) for c in grid.columns])
    if len(grid) <= 30:
        ax.set_yticks(range(len(grid)), [str(e) for e in grid.index])
    return fig


def reward_distribution(episodes, *, by: str = "task", ax: Any = None):
    """Every kept episode's reward per ``by`` group (``task``, ``environment``, ``model``...), with the
    group's mean and +-1 std; a box only where a group's rewards vary (five or more, three values)."""
    import numpy as np

    fig, ax = _axes(ax)
    if by not in episodes:
        raise KeyError(f"no column {by!r} to group by; the frame has {', '.join(map(str, episodes.columns))}")
    groups = [g for g in dict.fromkeys(episodes[by].dropna().tolist())]
    kept = _kept(episodes)
    data = [kept.loc[kept[by] == g, "reward"].to_numpy() for g in groups]
    positions = np.arange(1, len(groups) + 1)
    varied = [len(v) >= 5 and len(np.unique(v)) >= 3 for v in data]
    if any(varied):
        ax.boxplot(
            [v for v, keep in zip(data, varied) if keep],
            positions=[p for p, keep in zip(positions, varied) if keep],
            widths=0.6,
        )
    rng = np.random.default_rng(0)
    for pos, values in zip(positions, data):
        ax.plot(pos + rng.uniform(-0.15, 0.15, len(values)), values, "o", markersize=3, alpha=0.5, color="tab:blue")
    means = [v.mean() if len(v) else np.nan for v in data]
    stds = [v.std() if len(v) else 0.0 for v in data]
    ax.errorbar(positions + 0.3, means, yerr=stds, fmt="D", color="tab:orange", capsize=3, label="mean +-1 std")
    position_of = dict(zip(groups, positions))
    x = episodes[by].map(position_of).astype("float64").to_numpy()
    _mark_excluded(ax, episodes, x, episodes["reward"].to_numpy())
    ax.set_xticks(positions, [str(g) for g in groups], rotation=30 if len(groups) > 6 else 0)
    ax.set_title(f"Reward by {by} ({_over(episodes)})")
    ax.set_xlabel(by)
    ax.set_ylabel("reward")
    ax.legend(loc="best", fontsize="small")
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
    sizes = ", ".join(f"{label}: {len(frame)}" for label, frame in runs.items())
    ax.set_title(f"Mean reward per run{f' by {by}' if by else ''}, +-1 std (episodes: {sizes})")
    ax.set_ylabel("mean reward (masked and failed left out)")
    ax.set_xlabel(by if by is not None else "run")
    ax.legend(loc="best", fontsize="small")
    return fig
