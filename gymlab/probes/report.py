"""The verdict of a probe run: per probe and per task, the mean reward and how often it beat the threshold.

``ProbeReport`` keeps every probe's ``Rollouts``, so the episodes behind a flag stay at hand
(``report.episodes(probe, task)``, ``report.viewer(probe, task)``). It shows as an HTML table in a
notebook (a red cell opens onto its best episode), as plain text elsewhere, and as a pandas
frame (``report.frame``).
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Any

from gymlab.protocol.record import failure_counts, mean_reward

REAL = "real policy"


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


def _fmt(x: float) -> str:
    return "-" if x is None or math.isnan(x) else f"{x:.2f}"


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

    def _real_reward(self, task: Any) -> float:
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
            real_reward=self._real_reward(task),
            above=probe != REAL and not math.isnan(mean) and mean > self.threshold,
        )

    def _prompts(self) -> dict[Any, str]:
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

        prompts = self._prompts()
        flagged = set(self.flagged)
        data = [{**c.__dict__, "flagged": c.probe in flagged, "prompt": prompts.get(c.task, "")} for c in self.cells()]
        columns = [
            *("probe", "task", "episodes", "masked", "mean_reward", "beat_rate", "real_reward", "above", "flagged"),
            "prompt",
        ]
        return pd.DataFrame(data, columns=columns)

    # -- display ---------------------------------------------------------------------------------------

    def __repr__(self) -> str:
        return f"<ProbeReport mean reward per probe and task\n{self.text()}>"

    def text(self) -> str:
        """The verdict as a plain-text table (``!`` marks a task where a probe's mean reward is above
        the threshold), then the flagged probes."""
        head = ["probe", *(f"task {t}" for t in self.tasks), "all"]
        body = []
        if self.real is not None:
            body.append([REAL, *(_fmt(self._real_reward(t)) for t in self.tasks), _fmt(self._real_reward(None))])
        for probe in self.rollouts:
            cells = [self.cell(probe, t) for t in self.tasks]
            body.append(
                [
                    probe,
                    *(_fmt(c.mean_reward) + ("!" if c.above else "") for c in cells),
                    _fmt(self.cell(probe).mean_reward),
                ]
            )
        widths = [max(len(str(r[i])) for r in [head, *body]) for i in range(len(head))]
        lines = ["  ".join(str(v).ljust(w) for v, w in zip(r, widths)) for r in [head, *body]]
        flagged = self.flagged
        verdict = (
            f"flagged (mean reward over every task above {self.threshold:g}): {', '.join(flagged)}"
            if flagged
            else f"no probe earned a mean reward above {self.threshold:g} over every task"
        )
        if self.hits:
            verdict += f"; ! marks a task where a probe's mean reward is above {self.threshold:g}"
        return "\n".join(lines) + f"\n{verdict}"

    def _repr_html_(self) -> str:
        prompts = self._prompts()
        head = "".join(
            f"<th title='{html.escape(prompts.get(t, ''), quote=True)}'>task {html.escape(str(t))}"
            f"<br><small>{html.escape(_clip(prompts.get(t, ''), 40))}</small></th>"
            for t in self.tasks
        )
        rows = []
        if self.real is not None:
            real = "".join(f"<td class='r'>{_fmt(self._real_reward(t))}</td>" for t in self.tasks)
            rows.append(
                f"<tr class='gl-real'><th>{REAL}</th>{real}<td class='r'>{_fmt(self._real_reward(None))}</td></tr>"
            )
        flagged = self.flagged
        for probe in self.rollouts:
            cells = "".join(self._cell_html(self.cell(probe, t)) for t in self.tasks)
            overall = self.cell(probe)
            desc = html.escape(_describe(self.policies.get(probe)), quote=True)
            mark = " ⚑" if probe in flagged else ""
            cls = " class='gl-flag-probe'" if mark else ""
            rows.append(
                f"<tr><th title='{desc}'{cls}>{html.escape(probe)}{mark}</th>{cells}{self._cell_html(overall)}</tr>"
            )
        verdict = (
            f"<b class='gl-flag-probe'>Flagged ⚑</b> (mean reward over every task above {self.threshold:g}): "
            f"{html.escape(', '.join(flagged))}."
            if flagged
            else f"No probe earned a mean reward above {self.threshold:g} over every task."
        )
        if self.hits:
            verdict += (
                " A red cell is a task where the probe's mean reward is above the threshold: open it for its "
                "best episode, or <code>report.viewer(probe, task)</code>."
            )
        return (
            f"{_STYLE}<div class='gl-probe'><b>Reward probes</b>: mean reward per probe and task "
            f"(beat: share of episodes with reward above {self.threshold:g}).<table>"
            f"<tr><th>probe</th>{head}<th>all tasks</th></tr>{''.join(rows)}</table>{verdict}</div>"
        )

    def _cell_html(self, c: Cell) -> str:
        masked = f"<br><small class='gl-masked'>{c.masked} masked</small>" if c.masked else ""
        text = f"{_fmt(c.mean_reward)}<br><small>beat {_fmt(c.beat_rate)}</small>{masked}"
        if not c.above:
            return f"<td class='r'>{text}</td>"
        best = max(self.episodes(c.probe, c.task), key=lambda r: (not r.mask_sample, r.reward))
        return f"<td class='r gl-flag'>{text}<details><summary>episode</summary>{transcript_html(best)}</details></td>"


def _describe(policy: Any) -> str:
    from gymlab.probes.policies import describe

    return describe(policy) if policy is not None else ""


def _clip(text: str, n: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def transcript_html(record: Any) -> str:
    """An episode's conversation as a small table: the prompt, each step's items and observation, the reward."""
    from gymlab.lab.display import item_row

    lines = [item_row(i) for i in record.responses_create_params.input_items()]
    for step in record.steps:
        lines.extend(item_row(i) for i in [*step.action, *step.tool_outputs])
        if step.observation:
            lines.append(("observation", str(step.observation)))
    rows = "".join(
        f"<tr><td>{html.escape(who)}</td><td>{html.escape(_clip(what, 200))}</td></tr>" for who, what in lines
    )
    failures = failure_counts([record])
    tail = f" masked ({html.escape(', '.join(failures))})" if failures else ""
    stop = " truncated" if record.truncated else ""
    return f"<table class='gl-tr'>{rows}</table><small>reward {record.reward:g}{stop}{tail}</small>"


_STYLE = (
    "<style>.gl-probe table{border-collapse:collapse;font-size:12px}"
    ".gl-probe td,.gl-probe th{border:1px solid #ddd;padding:2px 6px;vertical-align:top}"
    ".gl-probe .r{text-align:right}.gl-probe .gl-flag{background:#fdd}"
    ".gl-probe .gl-flag-probe{color:#b00}.gl-probe .gl-real{background:#eef6ee}"
    ".gl-probe .gl-masked{color:#b60}.gl-probe .gl-tr td{text-align:left;border:0;font-family:monospace}</style>"
)
