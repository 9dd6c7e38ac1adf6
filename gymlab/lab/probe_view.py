"""The views of a probe report (``gymlab.probes.ProbeReport``, which holds the runs and the verdict): the
verdict as a plain-text table and as an HTML table whose red cells open onto their best episode."""

from __future__ import annotations

import html
import math
from typing import Any

from gymlab.lab.display import clip, conversation
from gymlab.protocol.record import failure_counts

#: The row of the real policy's run, beside the probes'.
REAL = "real policy"


def _fmt(x: float, spec: str = ".2f") -> str:
    return "-" if x is None or math.isnan(x) else format(x, spec)


def _real_row(report: Any) -> list[str]:
    """The real policy's mean reward on each task and over all, and its mask rate."""
    rewards = [report.real_reward(t) for t in [*report.tasks, None]]
    return [*map(_fmt, rewards), _fmt(report.real_mask_rate(None), ".0%")]


def _verdict(report: Any) -> list[str]:
    """The verdict's sentences: one per flagged probe (why), or that none was; then the shortcuts tried."""
    reasons = report.reasons()
    lines = list(reasons.values()) or [
        f"No probe earned a mean reward above {report.threshold:g} over every task, or was masked more often "
        "than the real policy."
    ]
    tried = "; ".join(f"{kind} ({_runs(names)})" for kind, names in report.shortcuts().items())
    return [*lines, f"Shortcuts tried: {tried}."]


def _runs(names: list[str]) -> str:
    """Run names with a probe's variants together: ``tool_leak:all, tool_leak:first`` as ``tool_leak: all, first``."""
    grouped: dict[str, list[str]] = {}
    for name in names:
        probe, sep, variant = name.partition(":")
        grouped.setdefault(probe + sep, []).append(variant)
    return ", ".join(f"{probe} {'/'.join(v)}" if probe.endswith(":") else probe for probe, v in grouped.items())


def report_text(report: Any) -> str:
    """The verdict as a plain-text table of mean rewards (``!`` marks a task where a probe's mean reward
    is above the threshold) with each run's mask rate, then one line per flagged probe saying why,
    then the kinds of shortcut tried."""
    head = ["probe", *(f"task {t}" for t in report.tasks), "all", "masked"]
    body = []
    if report.real is not None:
        body.append([REAL, *_real_row(report)])
    flagged = report.flagged
    for probe in report.rollouts:
        cells = [report.cell(probe, t) for t in report.tasks]
        overall = report.cell(probe)
        body.append(
            [
                probe + (" *" if probe in flagged else ""),
                *(_fmt(c.mean_reward) + ("!" if c.above else "") for c in cells),
                _fmt(overall.mean_reward),
                _fmt(overall.mask_rate, ".0%") + ("!" if overall.masked_more else ""),
            ]
        )
    widths = [max(len(str(r[i])) for r in [head, *body]) for i in range(len(head))]
    lines = ["  ".join(str(v).ljust(w) for v, w in zip(r, widths)) for r in [head, *body]]
    notes = [f"* flagged; ! a mean reward above {report.threshold:g}, or a mask rate above the real policy's"]
    return "\n".join([*lines, *notes, *_verdict(report)])


def report_html(report: Any, descriptions: dict[str, str]) -> str:
    """The verdict as an HTML table; ``descriptions``: each probe's policy in a line (its row's tooltip)."""
    prompts = report.prompts()
    head = "".join(
        f"<th title='{html.escape(prompts.get(t, ''), quote=True)}'>task {html.escape(str(t))}"
        f"<br><small>{html.escape(clip(' '.join(prompts.get(t, '').split()), 40))}</small></th>"
        for t in report.tasks
    )
    rows = []
    if report.real is not None:
        real = "".join(f"<td class='r'>{v}</td>" for v in _real_row(report))
        rows.append(f"<tr class='gl-real'><th>{REAL}</th>{real}</tr>")
    flagged = report.flagged
    for probe in report.rollouts:
        cells = "".join(_cell_html(report, report.cell(probe, t)) for t in report.tasks)
        overall = report.cell(probe)
        desc = html.escape(descriptions.get(probe, ""), quote=True)
        mark = " ⚑" if probe in flagged else ""
        cls = " class='gl-flag-probe'" if mark else ""
        rate = f"<td class='r{' gl-flag' if overall.masked_more else ''}'>{_fmt(overall.mask_rate, '.0%')}</td>"
        rows.append(
            f"<tr><th title='{desc}'{cls}>{html.escape(probe)}{mark}</th>{cells}{_cell_html(report, overall)}"
            f"{rate}</tr>"
        )
    verdict = "".join(
        f"<li{' class=gl-flag-probe' if flagged and i < len(flagged) else ''}>{html.escape(line)}</li>"
        for i, line in enumerate(_verdict(report))
    )
    verdict = f"<ul>{verdict}</ul>"
    if report.hits:
        verdict += (
            " A red cell is a task where the probe's mean reward is above the threshold: open it for its "
            "best episode, or <code>report.viewer(probe, task)</code>."
        )
    return (
        f"{_STYLE}<div class='gl-probe'><b>Reward probes</b>: mean reward per probe and task "
        f"(beat: share of episodes with reward above {report.threshold:g}).<table>"
        f"<tr><th>probe</th>{head}<th>all tasks</th><th>masked</th></tr>{''.join(rows)}</table>{verdict}</div>"
    )


def _cell_html(report: Any, c: Any) -> str:
    masked = f"<br><small class='gl-masked'>{c.masked} masked</small>" if c.masked else ""
    text = f"{_fmt(c.mean_reward)}<br><small>beat {_fmt(c.beat_rate)}</small>{masked}"
    if not c.above:
        return f"<td class='r'>{text}</td>"
    best = max(report.episodes(c.probe, c.task), key=lambda r: (not r.mask_sample, r.reward))
    return f"<td class='r gl-flag'>{text}<details><summary>episode</summary>{transcript_html(best)}</details></td>"


def transcript_html(record: Any) -> str:
    """An episode's conversation as a small table: the prompt, each step's items and observation, the reward."""
    rows = "".join(
        f"<tr><td>{html.escape(who)}</td><td>{html.escape(clip(' '.join(what.split()), 200))}</td></tr>"
        for who, what, _ in conversation(record)
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
