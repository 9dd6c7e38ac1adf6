"""``ProbeReport``: per probe and task the mean reward, mask rate and beat rate, why each flagged probe
is flagged, and every probe's ``Rollouts`` (shown through ``gymlab.lab.probe_view``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gymlab.lab.probe_view import REAL, report_html, report_text
from gymlab.probes.candidates import row_prompt
from gymlab.probes.policies import describe, guesses, shortcut
from gymlab.protocol.record import failure_counts, mean_reward

__all__ = ["REAL", "Cell", "ProbeReport"]


@dataclass(frozen=True)
class Cell:
    """One probe on one task (``task`` None: over every task); ``above``, ``masked_more`` and ``by_chance``
    are the verdict's flags (docs/probes.md)."""

    probe: str
    task: Any
    episodes: int
    masked: int
    mask_rate: float
    mean_reward: float
    beat_rate: float
    real_reward: float
    real_mask_rate: float
    above: bool
    masked_more: bool
    by_chance: bool = False


def _mask_rate(records: list[Any]) -> float:
    return sum(bool(r.mask_sample) for r in records) / len(records) if records else math.nan


def _beat_rate(records: list[Any], threshold: float) -> float:
    graded = [r for r in records if not r.mask_sample]
    return sum(r.reward > threshold for r in graded) / len(graded) if graded else math.nan


class ProbeReport:
    """The probes' rollouts and their verdict. ``.frame``, ``.flagged``, ``.episodes(probe, task)``."""

    def __init__(
        self,
        rollouts: dict[str, Any],
        *,
        real: Any = None,
        rows: list[dict[str, Any]] | None = None,
        threshold: float = 0.0,
        policies: dict[str, Any] | None = None,
    ):
        self.rollouts = dict(rollouts)
        self.real = real
        self.rows = list(rows or [])
        self.threshold = threshold
        self.policies = dict(policies or {})
        self.tasks = sorted({r.task_index for rs in self.rollouts.values() for r in rs}, key=lambda t: (t is None, t))
        runs = {**self.rollouts, **({REAL: self.real} if self.real is not None else {})}
        self._by_task: dict[tuple[str, Any], list[Any]] = {}
        for name, records in runs.items():
            for r in records:
                self._by_task.setdefault((name, r.task_index), []).append(r)
        self._cells: dict[tuple[str, Any], Cell] = {}

    def episodes(self, probe: str, task: Any = None):
        """The probe's episodes (``Rollouts``), of one task or of all; ``probe="real policy"`` for the real run."""
        from gymlab.lab.runs import Rollouts

        if probe == REAL:
            if self.real is None:
                raise KeyError("this report has no real-policy run; pass real_policy= to probe")
            source = self.real
        elif probe in self.rollouts:
            source = self.rollouts[probe]
        else:
            raise KeyError(f"no probe {probe!r} in this report; probes: {', '.join(self.rollouts)}")
        return Rollouts(source if task is None else self._by_task.get((probe, task), []))

    def viewer(self, probe: str, task: Any = None):
        """An ``EpisodeViewer`` on the probe's best-rewarded episode (of ``task``, or of any task)."""
        from gymlab.lab.widgets import EpisodeViewer

        found = self.episodes(probe, task)
        if not found:
            raise KeyError(f"probe {probe!r} has no episodes of task {task!r}")
        return EpisodeViewer(max(found, key=lambda r: (not r.mask_sample, r.reward)))

    def real_reward(self, task: Any) -> float:
        """The real policy's mean reward on ``task`` (None: over every task); NaN without a real run."""
        return mean_reward(self._real(task)) if self.real is not None else math.nan

    def cell(self, probe: str, task: Any = None) -> Cell:
        """The verdict of ``probe`` on ``task`` (None: over every task)."""
        if (probe, task) not in self._cells:
            self._cells[probe, task] = self._cell(probe, task)
        return self._cells[probe, task]

    def real_mask_rate(self, task: Any) -> float:
        """The share of the real policy's episodes (of ``task``, or all) that were masked; 0 without a real run."""
        return _mask_rate(self._real(task)) if self.real is not None else 0.0

    def _real(self, task: Any) -> Any:
        return self.real if task is None else self._by_task.get((REAL, task), [])

    def by_chance(self, probe: str) -> bool:
        """Whether ``probe`` is a guess (``policies.guesses``) paying one task at most: that task's answer."""
        if probe == REAL or not guesses(self.policies.get(probe)):
            return False
        paid = (mean_reward(self._by_task.get((probe, t), [])) for t in self.tasks)
        return sum(m > self.threshold for m in paid) <= 1

    def _cell(self, probe: str, task: Any) -> Cell:
        records = list(self.episodes(probe, task))
        mean, masks, real_masks = mean_reward(records), _mask_rate(records), self.real_mask_rate(task)
        chance = self.by_chance(probe)
        return Cell(
            probe=probe,
            task=task,
            episodes=len(records),
            masked=sum(bool(r.mask_sample) for r in records),
            mask_rate=masks,
            mean_reward=mean,
            beat_rate=_beat_rate(records, self.threshold),
            real_reward=self.real_reward(task),
            real_mask_rate=real_masks,
            above=probe != REAL and not math.isnan(mean) and mean > self.threshold and not chance,
            masked_more=probe != REAL and masks > (0.0 if math.isnan(real_masks) else real_masks),
            by_chance=chance,
        )

    def prompts(self) -> dict[Any, str]:
        """Each task's prompt, by task index (a row's own ``_ng_task_index``, else its position)."""
        return {row.get("_ng_task_index", i): row_prompt(row) for i, row in enumerate(self.rows)}

    def components(self, probe: str) -> dict[str, float]:
        """A rubric's components by their mean value over the probe's graded episodes, highest first."""
        values: dict[str, list[float]] = {}
        for r in self.episodes(probe):
            if not r.mask_sample:
                for name, value in (r.reward_components or {}).items():
                    if value is not None:
                        values.setdefault(name, []).append(float(value))
        means = {name: math.fsum(v) / len(v) for name, v in values.items()}
        return dict(sorted(means.items(), key=lambda kv: -kv[1]))

    def shortcuts(self) -> dict[str, list[str]]:
        """The kinds of shortcut tried, each with the probes that tried it."""
        kinds: dict[str, list[str]] = {}
        for name in self.rollouts:
            kinds.setdefault(shortcut(self.policies.get(name)), []).append(name)
        return kinds

    def reasons(self) -> dict[str, str]:
        """Why each flagged probe is flagged, a sentence each: its mean reward and the components that paid
        it, or its mask rate and failure kinds."""
        out = {}
        for name in self.flagged:
            c, why = self.cell(name), []
            if c.above:
                paid = [f"{k} (mean value {v:.2f})" for k, v in self.components(name).items() if v > 0]
                by = (
                    f", paid by the component{'s' * (len(paid) > 1)} {', '.join(paid)}; a component's value is "
                    "before its weight, not the reward"
                    if paid
                    else ""
                )
                why.append(f"it earned a mean reward of {c.mean_reward:.2f} (above {self.threshold:g}){by}")
            if c.masked_more:
                kinds = ", ".join(f"{k} {n}" for k, n in failure_counts(self.episodes(name)).items())
                than = f" against the real policy's {c.real_mask_rate:.0%}" if self.real is not None else ""
                why.append(
                    f"{c.mask_rate:.0%} of its episodes were masked ({kinds}){than}: a masked episode leaves "
                    "the mean, so a policy can hide its zeros"
                )
            out[name] = f"{name}: {' and '.join(why)}."
        return out

    def cells(self) -> list[Cell]:
        """Every probe on every task."""
        return [self.cell(p, t) for p in self.rollouts for t in self.tasks]

    @property
    def hits(self) -> list[tuple[str, Any]]:
        """(probe, task) pairs where the probe's mean reward on the task is above the threshold."""
        return [(c.probe, c.task) for c in self.cells() if c.above]

    @property
    def flagged(self) -> list[str]:
        """The runs whose cell over every task is ``above`` or ``masked_more``, in table order."""
        return [p for p in self.rollouts if self.cell(p).above or self.cell(p).masked_more]

    @property
    def frame(self):
        """One row per probe and task: the ``Cell`` fields, flagged, shortcut (the kind it tries), prompt."""
        import pandas as pd

        prompts, flagged = self.prompts(), set(self.flagged)
        data = [
            {**c.__dict__, "flagged": c.probe in flagged, "shortcut": shortcut(self.policies.get(c.probe))}
            | {"prompt": prompts.get(c.task, "")}
            for c in self.cells()
        ]
        columns = [*Cell.__dataclass_fields__, "flagged", "shortcut", "prompt"]
        return pd.DataFrame(data, columns=columns)

    def __repr__(self) -> str:
        return f"<ProbeReport mean reward per probe and task\n{self.text()}>"

    def text(self) -> str:
        """The verdict as a plain-text table, then the flagged probes."""
        return report_text(self)

    def _repr_html_(self) -> str:
        return report_html(self, {name: describe(policy) for name, policy in self.policies.items()})
