"""The verdict of a probe run: per probe and per task, the mean reward and how often it beat the threshold.

``ProbeReport`` keeps every probe's ``Rollouts``, so the episodes behind a flag stay at hand
(``report.episodes(probe, task)``, ``report.viewer(probe, task)``). It shows as an HTML table in a
notebook (a red cell opens onto its best episode), as plain text elsewhere (both drawn by
``gymlab.lab.probe_view``), and as a pandas frame (``report.frame``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from gymlab.lab.probe_view import REAL, report_html, report_text
from gymlab.protocol.record import mean_reward

__all__ = ["REAL", "Cell", "ProbeReport"]


@dataclass(frozen=True)
class Cell:
    """One probe on one task (``task`` None: over every task)."""

    probe: str
    task: Any
    episodes: int
    masked: int
    mean_reward: float
    beat_rate: float
    real_reward: float
    above: bool


def _task_of(record: Any) -> Any:
    return record.task_index


def _beat_rate(records: list[Any], threshold: float) -> float:
    graded = [r for r in records if not r.mask_sample]
    return sum(r.reward > threshold for r in graded) / len(graded) if graded else math.nan


def _prompt(row: dict[str, Any]) -> str:
    """A row's task as one line: its last user message (else its first message)."""
    items = (row.get("responses_create_params") or {}).get("input") or []
    if isinstance(items, str):
        return items
    texts = [(i.get("role"), i.get("content")) for i in items if isinstance(i, dict)]
    texts = [(role, c if isinstance(c, str) else " ".join(p.get("text") or "" for p in c)) for role, c in texts]
    users = [t for role, t in texts if role == "user"]
    return (users[-1] if users else texts[0][1] if texts else "") or ""


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
        self.tasks = sorted({_task_of(r) for rs in self.rollouts.values() for r in rs}, key=lambda t: (t is None, t))
        runs = {**self.rollouts, **({REAL: self.real} if self.real is not None else {})}
        self._by_task: dict[tuple[str, Any], list[Any]] = {}
        for name, records in runs.items():
            for r in records:
                self._by_task.setdefault((name, _task_of(r)), []).append(r)
        self._cells: dict[tuple[str, Any], Cell] = {}

    # -- the episodes ----------------------------------------------------------------------------------

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

    # -- the verdict -----------------------------------------------------------------------------------

    def real_reward(self, task: Any) -> float:
        """The real policy's mean reward on ``task`` (None: over every task); NaN without a real run."""
        if self.real is None:
            return math.nan
        return mean_reward(self.real if task is None else self._by_task.get((REAL, task), []))

    def cell(self, probe: str, task: Any = None) -> Cell:
        """The verdict of ``probe`` on ``task`` (None: over every task)."""
        if (probe, task) not in self._cells:
            self._cells[probe, task] = self._cell(probe, task)
        return self._cells[probe, task]

    def _cell(self, probe: str, task: Any) -> Cell:
        records = list(self.episodes(probe, task))
        mean = mean_reward(records)
        return Cell(
            probe=probe,
            task=task,
            episodes=len(records),
            masked=sum(bool(r.mask_sample) for r in records),
            mean_reward=mean,
            beat_rate=_beat_rate(records, self.threshold),
            real_reward=self.real_reward(task),
            above=probe != REAL and not math.isnan(mean) and mean > self.threshold,
        )

    def prompts(self) -> dict[Any, str]:
        """Each task's prompt, by task index (a row's own ``_ng_task_index``, else its position)."""
        return {row.get("_ng_task_index", i): _prompt(row) for i, row in enumerate(self.rows)}

    def cells(self) -> list[Cell]:
        """Every probe on every task."""
        return [self.cell(p, t) for p in self.rollouts for t in self.tasks]

    @property
    def hits(self) -> list[tuple[str, Any]]:
        """(probe, task) pairs where the probe's mean reward on the task is above the threshold."""
        return [(c.probe, c.task) for c in self.cells() if c.above]

    @property
    def flagged(self) -> list[str]:
        """The probes whose mean reward over every task is above the threshold, in table order."""
        return [p for p in self.rollouts if self.cell(p).above]

    @property
    def frame(self):
        """One row per probe and task: episodes, masked, mean_reward, beat_rate, real_reward, above (the
        task's mean reward is above the threshold), flagged (the probe's is, over every task), prompt."""
        import pandas as pd

        prompts = self.prompts()
        flagged = set(self.flagged)
        data = [{**c.__dict__, "flagged": c.probe in flagged, "prompt": prompts.get(c.task, "")} for c in self.cells()]
        columns = [
            *("probe", "task", "episodes", "masked", "mean_reward", "beat_rate", "real_reward", "above", "flagged"),
            "prompt",
        ]
        return pd.DataFrame(data, columns=columns)

    # -- display (the views: gymlab.lab.probe_view) ----------------------------------------------------

    def __repr__(self) -> str:
        return f"<ProbeReport mean reward per probe and task\n{self.text()}>"

    def text(self) -> str:
        """The verdict as a plain-text table, then the flagged probes."""
        return report_text(self)

    def _repr_html_(self) -> str:
        from gymlab.probes.policies import describe

        return report_html(self, {name: describe(policy) for name, policy in self.policies.items()})
