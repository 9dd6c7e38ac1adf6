"""Reward plots from frames: each draws on ``ax`` (or a new Figure) and returns the Figure; masked and
failed episodes are crosses, left out of the statistics; bands are 95% intervals of a mean. docs/plots.md."""

from __future__ import annotations

import functools
import io
from collections.abc import Mapping
from typing import Any

import numpy as np

MASKED_STYLE = {"marker": "x", "color": "0.55", "linestyle": "none", "label": "masked"}
FAILED_STYLE = {"marker": "x", "color": "tab:red", "linestyle": "none", "label": "failed"}
Z = 1.959964  # the normal quantile of a two-sided 95% interval


def interval(mean, std, n, *, binary: bool, low: float, high: float):
    """``(lower, upper)`` 95% interval of means over ``n`` values each: Wilson's for 0/1 rewards, else the
    normal one, clipped to the reward range; an open bound is NaN (not drawn)."""
    mean, n = np.asarray(mean, dtype="float64"), np.asarray(n, dtype="float64")
    if binary:
        z2n = Z * Z / n
        centre = (mean + z2n / 2) / (1 + z2n)
        half = Z * np.sqrt(mean * (1 - mean) / n + z2n / (4 * n)) / (1 + z2n)
    else:
        centre, half = mean, np.nan_to_num(Z * np.asarray(std, dtype="float64") / np.sqrt(n), nan=np.inf)
    # the mean always lies inside (rounding can put Wilson's bound a hair past it)
    lower = np.clip(np.fmin(centre - half, mean), low, high)
    upper = np.clip(np.fmax(centre + half, mean), low, high)
    return np.where(np.isinf(lower), np.nan, lower), np.where(np.isinf(upper), np.nan, upper)


def declared_range(reward_range: Any, frame: Any = None) -> tuple[float, float] | None:
    """``(low, high)`` from ``reward_range`` (else ``frame``'s ``attrs``): a pair, or a server class or instance
    declaring ``reward_range``."""
    if reward_range is None:
        reward_range = getattr(frame, "attrs", {}).get("reward_range")
    if reward_range is not None and not isinstance(reward_range, (tuple, list)):
        reward_range = getattr(reward_range, "reward_range", None)
    if reward_range is None:
        return None
    low, high = (float(v) for v in reward_range)
    if not low < high:
        raise ValueError(f"reward_range must be (low, high) with low < high, got {reward_range!r}")
    return low, high


def _scale(rewards, reward_range: Any = None) -> dict:
    """``interval``'s keywords: 0/1 rewards or not, and the declared range (given, else the frame's
    ``attrs``), else [0, 1] for 0/1 rewards, else unbounded; never the observed range."""
    values = np.asarray(rewards, dtype="float64")
    declared = declared_range(reward_range, rewards)
    binary = bool(len(values)) and bool(np.isin(values, (0.0, 1.0)).all()) and declared in (None, (0.0, 1.0))
    low, high = declared or ((0.0, 1.0) if binary else (-np.inf, np.inf))
    return {"binary": binary, "low": low, "high": high}


def _band_name(scale: dict) -> str:
    return "95% Wilson interval" if scale["binary"] else "95% interval of the mean"


@functools.cache
def figure_class() -> type:
    """A matplotlib ``Figure`` that shows itself as a PNG in a notebook without ``%matplotlib inline``."""
    from matplotlib.figure import Figure

    class NotebookFigure(Figure):
        def _repr_png_(self) -> bytes:
            buffer = io.BytesIO()
            self.savefig(buffer, format="png", bbox_inches="tight", facecolor="white")
            return buffer.getvalue()

    return NotebookFigure


def _axes(ax: Any):
    if ax is not None:
        return ax.figure, ax
    fig = figure_class()(figsize=(7, 4), layout="constrained")
    return fig, fig.add_subplot()


def _drawn(artist) -> bool:
    """Whether ``artist`` draws anything: a line with a finite point, a collection with a path."""
    if getattr(artist, "lines", None) and artist.lines[0] is not None:  # an error bar: its data line
        artist = artist.lines[0]
    if hasattr(artist, "get_ydata"):
        y = np.asarray(artist.get_ydata(), dtype="float64")
        return bool(np.isfinite(y).any())
    paths = getattr(artist, "get_paths", lambda: [True])()
    return bool(len(paths)) and any(len(getattr(p, "vertices", (1,))) for p in paths)


def _labelled(fig, ax, title: str, xlabel: str, ylabel: str, legend: bool = True):
    """``fig`` with ``ax``'s title, axis labels and a legend of what is drawn (no entry for an empty line)."""
    ax.set(title=title, xlabel=xlabel, ylabel=ylabel)
    if legend:
        handles, labels = ax.get_legend_handles_labels()
        shown = [(h, label) for h, label in zip(handles, labels) if _drawn(h)]
        if shown:
            ax.legend(*zip(*shown), loc="best", fontsize="small")
    return fig


def _failed_masked(episodes):
    """(failed, masked): a ``failure_kind``; else ``mask_sample``. Both stay out of reward statistics."""
    none = np.zeros(len(episodes), dtype=bool)
    failed = episodes["failure_kind"].notna().to_numpy() if "failure_kind" in episodes else none
    masked = episodes["mask_sample"].to_numpy(dtype=bool) if "mask_sample" in episodes else none
    return failed, masked & ~failed


def _kept(episodes):
    failed, masked = _failed_masked(episodes)
    return episodes[~(failed | masked)]


def _mark_excluded(ax, episodes, x, y) -> None:
    failed, masked = _failed_masked(episodes)
    for mask, style in ((masked, MASKED_STYLE), (failed, FAILED_STYLE)):
        if mask.any():
            ax.plot(x[mask], y[mask], **style)


def _over(episodes) -> str:
    """``48 episodes`` or ``48 episodes, 3 left out (masked or failed)``."""
    n, left_out = len(episodes), len(episodes) - len(_kept(episodes))
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
        xlabel = "episode, repeat by repeat (every task once per repeat)"
        return episodes.sort_values(keys, kind="stable"), xlabel, "repeat order"
    raise ValueError(f"order must be 'repeat' or 'completed', got {order!r}")


def reward_curve(
    episodes,
    *,
    window: int | None = None,
    order: str = "repeat",
    ax: Any = None,
    reward_range: Any = None,
):
    """Reward per episode with a rolling mean over ``window`` kept episodes (default: one repeat) and its
    95% interval, in ``order`` "repeat" (every task once per repeat) or "completed" (as they finished)."""
    fig, ax = _axes(ax)
    ordered, xlabel, name = _order(episodes, order)
    ordered = ordered.reset_index(drop=True)
    n_tasks = ordered["task"].nunique() if "task" in ordered else 0
    if window is None:
        window = n_tasks if n_tasks > 1 else 20
    x = np.arange(len(ordered))
    kept = _kept(ordered)
    ax.plot(x[kept.index], kept["reward"], "o", markersize=3, alpha=0.4, label="reward")
    rolling = kept["reward"].rolling(window, min_periods=1)
    mean, scale = rolling.mean(), _scale(kept["reward"], reward_range)
    low, high = interval(mean, rolling.std(), rolling.count(), **scale)
    ax.plot(x[kept.index], mean, "-", linewidth=2, label=f"rolling mean ({window})")
    ax.fill_between(x[kept.index], low, high, alpha=0.2, label=_band_name(scale))
    _mark_excluded(ax, ordered, x, ordered["reward"].to_numpy())
    if order == "repeat" and "repeat" in ordered and ordered["repeat"].nunique() > 1:
        repeats = ordered["repeat"].to_numpy(dtype="float64", na_value=np.nan)
        starts = np.flatnonzero(repeats[1:] != repeats[:-1]) + 1
        for start in starts:
            ax.axvline(start - 0.5, color="0.85", linewidth=0.8, linestyle=":")
    what = f"{window}{' (one repeat)' if window == n_tasks else ''}"
    title = f"Reward per episode in {name}, rolling mean of {what} ({_over(episodes)})"
    return _labelled(fig, ax, title, xlabel, "reward")


def _drawn_steps(steps, episodes, max_episodes: int | None):
    """(the steps to draw, how many episodes, what they are): the kept episodes' steps, or a sample of
    ``max_episodes`` taken repeat by repeat when ``episodes`` says the tasks, else spread over the run."""
    if episodes is not None:
        kept = _kept(episodes)
        steps = steps[steps["episode"].isin(set(kept["episode"]))]
    ids = list(dict.fromkeys(steps["episode"].tolist()))
    if max_episodes is None or len(ids) <= max_episodes:
        return steps, len(ids), f"{len(ids)} episode{'s' * (len(ids) != 1)}"
    if episodes is not None and "task" in episodes:
        present = kept[kept["episode"].isin(set(ids))]
        keys = [k for k in ("repeat", "task", "episode") if k in present]
        chosen = present.sort_values(keys, kind="stable")["episode"].tolist()[:max_episodes]
        how = f"every task once per repeat, {present.loc[present['episode'].isin(chosen), 'task'].nunique()} tasks"
    else:
        chosen = [ids[i] for i in np.linspace(0, len(ids) - 1, max_episodes).round().astype(int)]
        how = "spread evenly over the run"
    what = f"a sample of {len(chosen)} of {len(ids)} episodes ({how})"
    return steps[steps["episode"].isin(set(chosen))], len(chosen), what


def step_rewards(
    steps, *, episodes: Any = None, ax: Any = None, max_episodes: int | None = None, reward_range: Any = None
):
    """Mean reward at each step with its 95% interval, the steps on the way and the episodes' last steps
    apart, and the mean cumulative reward; ``episodes`` leaves masked and failed episodes out."""
    fig, ax = _axes(ax)
    kept, n, what = _drawn_steps(steps, episodes, max_episodes)
    last = kept["step"].to_numpy() == kept.groupby("episode")["step"].transform("max").to_numpy()
    scale = _scale(kept["reward"], reward_range)
    for label, part, style in (
        ("mean reward at a step on the way", kept[~last], "o-"),
        ("mean reward at the episode's last step", kept[last], "s"),
    ):
        by_step = part.groupby("step")["reward"]
        mean, count = by_step.mean(), by_step.size()
        if not len(mean):
            continue
        low, high = interval(mean, by_step.std(), count, **scale)
        (line,) = ax.plot(mean.index, mean, style, label=label)
        ax.fill_between(mean.index, low, high, alpha=0.15, color=line.get_color())
        for step, k in count.items():
            if k < n:  # fewer episodes are in this mean: say how many
                ax.annotate(f"n={k}", (step, mean[step]), fontsize="x-small", xytext=(3, 3), textcoords="offset points")
    if "cumulative_reward" in kept:
        cumulative = kept.groupby("step")["cumulative_reward"].mean()
        ax.plot(cumulative.index, cumulative, "--", color="0.4", label="mean cumulative reward")
    ax.axhline(0.0, color="0.8", linewidth=0.8)
    if len(kept):
        ticks = sorted(set(kept["step"].tolist()))
        ax.set_xticks(ticks)
        ax.margins(x=0.08)
    title = f"Mean reward by step over {what} (bands: {_band_name(scale)})"
    return _labelled(fig, ax, title, "step (model turn or transition, from 0)", "reward at the step")


NEUTRAL = "0.85"  # the heatmap's colour for a zero reward before an episode's last step


def reward_heatmap(steps, *, episodes: Any = None, ax: Any = None, max_episodes: int = 100, reward_range: Any = None):
    """Reward of every step of each episode (rows: episodes, columns: steps); a zero reward before an
    episode's last step in a neutral grey, not as a failure."""
    from matplotlib.colors import ListedColormap

    fig, ax = _axes(ax)
    kept, _, what = _drawn_steps(steps, episodes, max_episodes)
    grid = kept.pivot_table(index="episode", columns="step", values="reward")
    values = grid.to_numpy()
    last = kept.groupby("episode")["step"].max().reindex(grid.index).to_numpy()
    neutral = (values == 0) & (grid.columns.to_numpy()[None, :] < last[:, None])
    declared = declared_range(reward_range, steps)
    low, high = declared or (np.nanmin(values, initial=0.0), np.nanmax(values, initial=1.0))
    image = ax.imshow(
        np.where(neutral, np.nan, values),
        aspect="auto",
        interpolation="nearest",
        cmap="RdYlGn",
        vmin=min(low, 0.0),
        vmax=max(high, 0.0) or 1.0,
    )
    ax.imshow(np.where(neutral, 1.0, np.nan), aspect="auto", interpolation="nearest", cmap=ListedColormap([NEUTRAL]))
    fig.colorbar(image, ax=ax, label="reward at the step")
    ax.set_xticks(range(len(grid.columns)), [str(c) for c in grid.columns])
    if len(grid) <= 30:
        ax.set_yticks(range(len(grid)), [str(e) for e in grid.index])
    title = f"Reward by episode and step, {what} (grey: 0 before the last step)"
    return _labelled(fig, ax, title, "step", "episode", legend=False)


def reward_distribution(episodes, *, by: str = "task", ax: Any = None, reward_range: Any = None):
    """Every kept episode's reward per ``by`` group, with the group's mean and its 95% interval; a box only
    where a group's rewards vary (five or more, three values)."""
    fig, ax = _axes(ax)
    if by not in episodes:
        raise KeyError(f"no column {by!r} to group by; the frame has {', '.join(map(str, episodes.columns))}")
    groups = list(dict.fromkeys(episodes[by].dropna().tolist()))
    kept = _kept(episodes)
    data = [kept.loc[kept[by] == g, "reward"].to_numpy() for g in groups]
    positions = np.arange(1, len(groups) + 1)
    varied = [i for i, v in enumerate(data) if len(v) >= 5 and len(np.unique(v)) >= 3]
    if varied:
        ax.boxplot([data[i] for i in varied], positions=positions[varied], widths=0.6)
    rng = np.random.default_rng(0)
    for pos, values in zip(positions, data):
        ax.plot(pos + rng.uniform(-0.15, 0.15, len(values)), values, "o", markersize=3, alpha=0.5, color="tab:blue")
    scale = _scale(kept["reward"], reward_range)
    means, yerr = _means(data, scale)
    ax.errorbar(
        positions + 0.3, means, yerr=yerr, fmt="D", color="tab:orange", capsize=3, label=f"mean, {_band_name(scale)}"
    )
    x = episodes[by].map(dict(zip(groups, positions))).astype("float64").to_numpy()
    _mark_excluded(ax, episodes, x, episodes["reward"].to_numpy())
    ax.set_xticks(positions, [str(g) for g in groups], rotation=30 if len(groups) > 6 else 0)
    return _labelled(fig, ax, f"Reward by {by} ({_over(episodes)})", by, "reward")


def _means(groups: list[np.ndarray], scale: dict) -> tuple[np.ndarray, np.ndarray]:
    """Each group's mean and its error bars (an open bound: no bar on that side)."""
    means = np.array([v.mean() if len(v) else np.nan for v in groups])
    stds = [v.std(ddof=1) if len(v) > 1 else np.nan for v in groups]
    low, high = interval(means, stds, [max(len(v), 1) for v in groups], **scale)
    return means, np.nan_to_num([means - low, high - means])


def compare_runs(runs: Mapping[str, Any], *, by: str | None = None, ax: Any = None, reward_range: Any = None):
    """Runs side by side (``{"greedy": a.episodes, "random": b.episodes}``): mean kept reward per run (per
    ``by`` group when given), with its 95% interval."""
    if not runs:
        raise ValueError("compare_runs needs at least one run")
    fig, ax = _axes(ax)
    labels = list(runs)
    groups = (
        [None] if by is None else list(dict.fromkeys(g for frame in runs.values() for g in frame[by].dropna().tolist()))
    )
    width = 0.8 / len(labels)
    x = np.arange(len(groups))
    if reward_range is None:  # the first run's declared range (``attrs``), if any
        reward_range = next((f.attrs["reward_range"] for f in runs.values() if "reward_range" in f.attrs), None)
    scale = _scale(np.concatenate([_kept(frame)["reward"].to_numpy() for frame in runs.values()]), reward_range)
    for n, label in enumerate(labels):
        kept = _kept(runs[label])
        values = [kept["reward"] if g is None else kept.loc[kept[by] == g, "reward"] for g in groups]
        means, yerr = _means([v.to_numpy() for v in values], scale)
        offset = (n - (len(labels) - 1) / 2) * width
        ax.bar(x + offset, means, width=width, yerr=yerr, capsize=3, label=label)
        if excluded := len(runs[label]) - len(kept):
            note = f"{excluded} masked/failed"
            ax.annotate(note, (x[-1] + offset, 0), fontsize="x-small", color="tab:red", ha="center", va="bottom")
    ax.set_xticks(x, ["all episodes"] if by is None else [str(g) for g in groups])
    sizes = ", ".join(f"{label}: {len(frame)}" for label, frame in runs.items())
    title = f"Mean reward per run{f' by {by}' if by else ''}, {_band_name(scale)} (episodes: {sizes})"
    return _labelled(fig, ax, title, by if by is not None else "run", "mean reward (masked and failed left out)")
