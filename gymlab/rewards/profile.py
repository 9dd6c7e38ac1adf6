"""Reward profiling: does the reward separate good episodes from bad, task by task? (docs/rewards.md)."""

from __future__ import annotations

import html
import math
import os
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gymlab.protocol.record import mean_reward_text
from gymlab.rewards.nemo_profile import nemo_profile, order_key, write_nemo_profile
from gymlab.rewards.stats import majority_at_k, pass_at_k


def _stats(values: Any) -> dict[str, Any]:
    """mean, sample std (ddof 1; 0.0 for one value, as NeMo Gym's profiler), min, median, max of each group."""
    std = values.std().where(values.count() != 1, 0.0)
    return {"mean": values.mean(), "std": std, "min": values.min(), "median": values.median(), "max": values.max()}


def _why(row: dict[str, Any]) -> str:
    """One sentence on why a flagged task matters to training ("" for a task not flagged)."""
    n = f"all {row['scored']} scored episodes"
    if row["always_0"]:
        return f"{n} scored 0: a group-relative method gets no success to reinforce (too hard, or a broken reward)."
    if row["always_1"]:
        return f"{n} succeeded: every advantage is 0, so the task teaches nothing (too easy for this policy)."
    if row["zero_variance"]:
        return (
            f"{n} scored {row['mean']:g} (std 0): every advantage against the group's mean is 0, so "
            "group-relative RL learns nothing from this task although its reward is neither 0 nor 1."
        )
    return ""


class Profile:
    """A reward profile: ``tasks``, ``components``, ``summary``, ``plot()``, ``write_nemo(path)``."""

    def __init__(self, records: Iterable[Any], *, threshold: float = 1.0):
        self.records = list(records)
        self.threshold = threshold
        by_task: dict[Any, list[Any]] = defaultdict(list)
        for r in self.records:
            by_task[r.task_index].append(r)
        self.by_task = dict(sorted(by_task.items(), key=lambda kv: order_key(kv[0])))
        self._by_index = list(enumerate(self.by_task.values()))  # a task's position: the key it is grouped by
        self.max_k = max((sum(not r.mask_sample for r in rs) for rs in self.by_task.values()), default=0)
        self.tasks = self._tasks_frame()
        self.components = self._components_frame()

    def _tasks_frame(self):
        import pandas as pd

        if not self.by_task:
            return pd.DataFrame()
        records = [(i, float(r.reward), r.mask_sample, bool(r.failure_kind)) for i, rs in self._by_index for r in rs]
        f = pd.DataFrame(records, columns=["i", "reward", "masked", "failed"])
        f["reward"], f["failed"] = f["reward"].mask(f["masked"]), f["failed"] & f["masked"]  # a masked reward: none
        groups = f.groupby("i")
        reward, n, c = groups["reward"], groups["reward"].count(), (f["reward"] >= self.threshold).groupby(f["i"]).sum()
        frame = pd.DataFrame({"task": list(self.by_task), "episodes": groups.size(), "scored": n})
        frame = frame.assign(masked=groups["masked"].sum(), failed=groups["failed"].sum(), **_stats(reward))
        for name, at_k in (("pass", pass_at_k), ("majority", majority_at_k)):
            for k in range(1, self.max_k + 1):
                frame[f"{name}@{k}"] = [at_k(m, j, k) if k <= m else math.nan for m, j in zip(n, c)]
        frame["always_0"] = (n > 0) & (reward.max() <= 0.0)
        frame["always_1"] = (n > 0) & (c == n)
        frame["zero_variance"] = (n >= 2) & (reward.min() == reward.max())
        frame["why"] = [_why(row) for row in frame.to_dict("records")]
        if all(isinstance(t, int) or t is None for t in self.by_task):
            frame["task"] = pd.array(list(self.by_task), dtype="Int64")  # as the episodes frame has it
        return frame.reset_index(drop=True)

    def _components_frame(self):
        import pandas as pd

        rows = []
        for i, records in self._by_index:
            graded = [r.reward_components for r in records if r.reward_components]
            rows += [(i, name, g.get(name)) for name in dict.fromkeys(n for g in graded for n in g) for g in graded]
        if not rows:
            return pd.DataFrame(columns=["task", "component", "n", "missing", "mean", "std"])
        f = pd.DataFrame(rows, columns=["i", "component", "value"]).astype({"value": "float64"})
        values = f.groupby(["i", "component"], sort=False)["value"]
        n = values.count()
        frame = pd.DataFrame(
            {
                "n": n,
                "missing": values.size() - n,
                **_stats(values),
                "always_0": (n > 0) & (values.max() <= 0.0),
                "always_1": (n > 0) & (values.min() >= self.threshold),
            }
        ).reset_index()
        tasks = list(self.by_task)
        frame.insert(0, "task", [tasks[i] for i in frame.pop("i")])
        return frame

    @property
    def summary(self) -> dict[str, Any]:
        """Figures over every task: counts, the mean reward, mean pass@k and majority@k, the flagged tasks."""
        t = self.tasks
        scored = [float(r.reward) for r in self.records if not r.mask_sample]
        out: dict[str, Any] = {
            "tasks": len(t),
            "episodes": len(self.records),
            "scored": len(scored),
            "masked": int(t["masked"].sum()) if len(t) else 0,
            "failed": int(t["failed"].sum()) if len(t) else 0,
            "mean_reward": math.fsum(scored) / len(scored) if scored else math.nan,
        }
        for name in ("pass", "majority"):
            out.update({f"{name}@{k}": float(t[f"{name}@{k}"].mean()) for k in range(1, self.max_k + 1)})
        for flag in ("always_0", "always_1", "zero_variance"):
            out[flag] = t["task"][t[flag]].tolist() if len(t) else []
        out["components"] = (
            self.components.groupby("component", sort=False)["mean"].mean().to_dict() if len(self.components) else {}
        )
        return out

    @property
    def flagged(self):
        """The tasks that always score the same (no signal for group-relative RL), ``why`` in a sentence."""
        t = self.tasks
        return t[t["always_0"] | t["always_1"] | t["zero_variance"]] if len(t) else t

    def plot(self, ax=None, *, component: str | None = None, bins: int = 20):
        """A histogram of per-task mean rewards (or of one component's per-task means); returns the Axes."""
        import matplotlib.pyplot as plt

        if ax is None:
            _, ax = plt.subplots(figsize=(6, 3.5))
        if component is None:
            means, what = self.tasks["mean"].dropna(), "mean reward"
        else:
            c = self.components
            means, what = c[c["component"] == component]["mean"].dropna(), f"mean {component}"
        ax.hist(means, bins=bins, range=(min(0.0, *means), max(1.0, *means)) if len(means) else None)
        ax.set_xlabel(f"per-task {what}")
        ax.set_ylabel("tasks")
        ax.yaxis.get_major_locator().set_params(integer=True)  # a count of tasks: no 0.5 ticks
        ax.set_title(f"{len(means)} tasks, {len(self.flagged)} flagged (no variance)")
        return ax

    def nemo(
        self, inputs: Iterable[dict] | None = None, *, masked_as_missing: bool = False
    ) -> tuple[list[dict], list[dict], list[dict]]:
        """NeMo Gym's profiler output (``nemo_profile``): per-task rows, per-agent and per-repeat metrics."""
        return nemo_profile(self.records, inputs, masked_as_missing=masked_as_missing)

    def write_nemo(
        self, path: str | os.PathLike, inputs: Iterable[dict] | None = None, *, masked_as_missing: bool = False
    ) -> tuple[Path, Path, Path]:
        """Write NeMo Gym's three profiler files beside rollouts file ``path`` (``write_nemo_profile``)."""
        return write_nemo_profile(self.records, path, inputs, masked_as_missing=masked_as_missing)

    def _repr_html_(self) -> str:
        s = self.summary
        head = (
            f"<p><b>Reward profile</b>: {s['tasks']} tasks, {s['episodes']} episodes ({s['masked']} masked, "
            f"{s['failed']} failed), {mean_reward_text(s['mean_reward'])}; {len(s['always_0'])} tasks always 0, "
            f"{len(s['always_1'])} always 1, {len(s['zero_variance'])} with no variance</p>"
        )
        flags = "".join(f"<li>task {html.escape(str(t))}: {html.escape(w)}</li>" for t, w in self.flags().items())
        table = self.tasks.drop(columns=["why"], errors="ignore").to_html(
            index=False, float_format=lambda v: f"{v:.3f}"
        )
        return head + (f"<ul>{flags}</ul>" if flags else "") + table

    def flags(self) -> dict[Any, str]:
        """Each flagged task's sentence (its ``why``), by task."""
        f = self.flagged
        return dict(zip(f["task"].tolist(), f["why"].tolist())) if len(f) else {}

    def __repr__(self) -> str:
        s = self.summary
        return (
            f"<Profile {s['tasks']} tasks, {s['episodes']} episodes, {mean_reward_text(s['mean_reward'])}, "
            f"{len(s['always_0'])} always 0, {len(s['always_1'])} always 1, {len(s['zero_variance'])} no variance>"
        )


def profile(records: Iterable[Any], *, threshold: float = 1.0) -> Profile:
    """The reward profile of rollout records (``Rollout`` objects), grouped by task."""
    return Profile(records, threshold=threshold)
