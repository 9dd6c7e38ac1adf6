"""HTML for notebooks: an episode's conversation with its rewards, a run's summary, ``lab.logs()``; a record's
conversation as (who, what, step) rows, which the viewer draws as bubbles and the probe report as a table."""

from __future__ import annotations

import html
from typing import Any

from gymlab.models.chat_convert import prompt_items
from gymlab.protocol import Message, Rollout, StepRecord
from gymlab.protocol.derived_steps import derived_steps
from gymlab.protocol.record import mean_reward_text

_STYLE = (
    "<style>.gl-ep{font-family:monospace;font-size:12px;border-collapse:collapse}"
    ".gl-ep td,.gl-ep th{border:1px solid #ddd;padding:2px 6px;text-align:left;vertical-align:top}"
    ".gl-ep .r{text-align:right}.gl-ep .fail{color:#b00}</style>"
)
# Inline too: JupyterLab right-aligns table cells and drops <style> from untrusted outputs.
_LEFT = "style='text-align:left;vertical-align:top;white-space:pre-wrap'"
_RIGHT = "style='text-align:right;vertical-align:top;white-space:nowrap'"
_TABLE = "class='gl-ep' style='border-collapse:collapse;font-family:monospace;font-size:12px'"


def _row(*cells: str, head: bool = False) -> str:
    tag = "th" if head else "td"
    styles = [_LEFT] * (len(cells) - 1) + [_LEFT if head else _RIGHT]  # a body row's last cell, the reward, right
    return "<tr>" + "".join(f"<{tag} {style}>{c}</{tag}>" for style, c in zip(styles, cells)) + "</tr>"


def clip(text: str, n: int) -> str:
    """``text`` cut to ``n`` characters, an ellipsis last when cut."""
    return text if len(text) <= n else text[: n - 1] + "…"


def _table(head: str, rows: list[str]) -> str:
    return f"{_STYLE}<div style='text-align:left'>{head}<table {_TABLE}>{''.join(rows)}</table></div>"


def flags(step: Any, sep: str = " ") -> str:
    return f"{sep}terminated" * step.terminated + f"{sep}truncated" * step.truncated


def _item_html(item: Any, mark: str = "") -> str:
    """One conversation item as a table row: who, what (clipped), the step's reward ``mark``."""
    who, what = item_row(item)
    return _row(html.escape(who), html.escape(clip(what, 300)), mark)


def item_row(item: Any) -> tuple[str, str]:
    """(who, what) for one conversation item."""
    kind = getattr(item, "type", "message")
    if kind == "message":
        return item.role, item.text
    if kind == "function_call":
        return "call", f"{item.name}({item.arguments})"
    if kind == "function_call_output":
        return "output", item.output
    if kind == "reasoning":
        return "reasoning", " ".join(s.text for s in item.summary)
    return kind, str(getattr(item, "model_dump", lambda: item)())


def episode_steps(record: Rollout) -> list[StepRecord]:
    """The record's steps; a record with none (a failed episode's) has them from its output (``derived_steps``)."""
    if record.steps:
        return list(record.steps)
    fields = record.model_dump(mode="json", include={"response", "reward", "terminated", "truncated"})
    return [StepRecord.model_validate(s) for s in derived_steps(fields)]


def conversation(record: Rollout, upto: int | None = None) -> list[tuple[str, str, int | None]]:
    """(who, what, step index) of the prompt's items (no step), then of steps ``0..upto`` (default: all):
    their items and observation (who: ``observation``)."""
    rows: list[tuple[str, str, int | None]] = [
        (*item_row(i), None) for i in prompt_items(record.responses_create_params)
    ]
    for step in episode_steps(record)[: None if upto is None else upto + 1]:
        rows += [(*item_row(i), step.index) for i in [*step.action, *step.tool_outputs]]
        if step.observation:
            rows.append(("observation", step.observation, step.index))
    return rows


def episode_html(ep: Any) -> str:
    """The conversation so far, each model turn's items next to its step's reward, and the totals."""
    history = list(ep.history)
    shown = {id(i) for i in history}
    mark_at: dict[int, str] = {}
    for step in ep.steps:
        # The marker goes on the step's last item in the conversation (a terminal step's outputs are not).
        for item in [i for i in [*step.action, *step.tool_outputs] if id(i) in shown][-1:]:
            mark_at[id(item)] = f"step {step.index}: {step.reward:g}{flags(step)}"
    if ep.done and ep.steps and ep.steps[-1].observation and ep.protocol == "gymnasium":
        history.append(Message(role="user", content=ep.steps[-1].observation))
    rows = [_item_html(item, mark_at.get(id(item), "")) for item in history]
    result = ep.result or {}
    head = (
        f"<b>{html.escape(ep.env_name)}</b> ({ep.protocol}, {'finished' if ep.done else 'open'}): "
        f"{len(ep.steps)} steps, reward {ep.reward:g}"
    )
    if result.get("mask_sample"):
        head += (
            f" <span class='fail'>masked={result.get('mask_sample')} "
            f"failure={html.escape(str(result.get('failure_kind')))}</span>"
        )
    return _table(head, [_row("who", "content", "reward", head=True), *rows])


def step_summary(record: Any) -> str:
    """A step's action in a few words: ``hit({})``, ``"I stand"``, ``2 calls``."""
    if record is None:
        return "step"
    calls = [i for i in record.action if getattr(i, "type", None) == "function_call"]
    if len(calls) == 1:
        return f"step {record.index}: {calls[0].name}({calls[0].arguments})"
    if calls:
        return f"step {record.index}: {len(calls)} calls"
    said = [item_row(i)[1] for i in record.action if getattr(i, "type", None) == "message"]
    return f"step {record.index}: " + (repr(clip(" ".join(said), 60)) if said else "no action")


def step_html(record: Any, *, observation: str | None = None) -> str:
    """One step: its action items, what the tools answered, the observation, reward and flags."""
    rows = []
    head = "<b>step</b>"
    if record is not None:
        rows = [_item_html(item) for item in [*record.action, *record.tool_outputs]]
        head = f"<b>step {record.index}</b>: reward {record.reward:g}{flags(record)}"
    if observation:
        rows.append(_row("observation", html.escape(clip(observation, 600)), ""))
    return _table(head, rows)


def rollouts_html(rollouts: Any) -> str:
    """A run's size, mean reward, masked and failed counts."""
    n = len(rollouts)
    counts = rollouts.failures
    kinds = ", ".join(f"{html.escape(k)} {v}" for k, v in counts.items())
    return (
        f"{_STYLE}<div><b>Rollouts</b>: {n} episodes, {rollouts.n_steps} steps, {mean_reward_text(rollouts.mean_reward)}"
        f"; {sum(counts.values())} masked{f' ({kinds})' if kinds else ''}. "
        "<code>.episodes</code>, <code>.steps</code>, <code>.calls</code> are pandas frames "
        "(<code>.episodes_frame(full=True)</code> for every column).</div>"
    )


class LogView(list):
    """Log entries (``gymlab._traces.Entry``): the full text in ``repr``, collapsible traces in HTML."""

    def __repr__(self) -> str:
        return "\n\n".join(map(str, self)) or "<no errors logged>"

    def _repr_html_(self) -> str:
        if not self:
            return "<p><i>no errors logged</i></p>"
        parts = []
        for entry in self:
            line = html.escape(str(entry).splitlines()[0])
            trace = html.escape(entry.trace) if entry.trace else ""
            body = f"<pre style='text-align:left;white-space:pre-wrap'>{trace}</pre>" if trace else ""
            parts.append(f"<details style='text-align:left'><summary><code>{line}</code></summary>{body}</details>")
        return "<div class='gymlab-logs'>" + "".join(parts) + "</div>"

    def __getitem__(self, index):
        item = super().__getitem__(index)
        return LogView(item) if isinstance(index, slice) else item
