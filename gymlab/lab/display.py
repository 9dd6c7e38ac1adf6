"""HTML for notebooks: an episode's conversation with its rewards, a run's summary. Standard library only."""

from __future__ import annotations

import html
from typing import Any

_STYLE = (
    "<style>.gl-ep{font-family:monospace;font-size:12px;border-collapse:collapse}"
    ".gl-ep td,.gl-ep th{border:1px solid #ddd;padding:2px 6px;text-align:left;vertical-align:top}"
    ".gl-ep .r{text-align:right}.gl-ep .fail{color:#b00}</style>"
)


def _clip(text: str, n: int = 300) -> str:
    text = text if len(text) <= n else text[: n - 1] + "…"
    return html.escape(text)


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


def episode_html(ep: Any) -> str:
    """The conversation so far, each model turn's items next to its step's reward, and the totals."""
    history = list(ep.history)
    shown = {id(i) for i in history}
    reward_at: dict[int, tuple[int, float, bool, bool]] = {}
    for step in ep.steps:
        # The marker goes on the step's last item in the conversation (a terminal step's outputs are not).
        last = [i for i in [*step.action, *step.tool_outputs] if id(i) in shown][-1:]
        for item in last:
            reward_at[id(item)] = (step.index, step.reward, step.terminated, step.truncated)
    if ep.done and ep.steps and ep.steps[-1].observation and ep.protocol == "gymnasium":
        from gymlab.protocol import Message

        history.append(Message(role="user", content=ep.steps[-1].observation))
    rows = []
    for item in history:
        who, what = item_row(item)
        step = reward_at.get(id(item))
        mark = ""
        if step is not None:
            mark = (
                f"step {step[0]}: {step[1]:g}" + (" terminated" if step[2] else "") + (" truncated" if step[3] else "")
            )
        rows.append(f"<tr><td>{html.escape(who)}</td><td>{_clip(what)}</td><td class='r'>{mark}</td></tr>")
    status = "finished" if ep.done else "open"
    extra = ""
    result = ep.result or {}
    if result.get("mask_sample"):
        extra = (
            f" <span class='fail'>masked={result.get('mask_sample')} "
            f"failure={html.escape(str(result.get('failure_kind')))}</span>"
        )
    head = (
        f"<b>{html.escape(ep.env_name)}</b> ({ep.protocol}, {status}): {len(ep.steps)} steps, "
        f"reward {ep.reward:g}{extra}"
    )
    return (
        f"{_STYLE}<div>{head}<table class='gl-ep'><tr><th>who</th><th>content</th><th>reward</th></tr>"
        + "".join(rows)
        + "</table></div>"
    )


def rollouts_html(rollouts: Any) -> str:
    """A run's size, mean reward, masked and failed counts."""
    from gymlab.protocol.record import failure_counts, mean_reward

    n = len(rollouts)
    counts = failure_counts(rollouts)
    kinds = ", ".join(f"{html.escape(k)} {v}" for k, v in counts.items())
    steps = sum(len(r.steps) for r in rollouts)
    return (
        f"{_STYLE}<div><b>Rollouts</b>: {n} episodes, {steps} steps, mean reward {mean_reward(rollouts):.3f} "
        f"over the unmasked; {sum(counts.values())} masked{f' ({kinds})' if kinds else ''}. "
        "<code>.episodes</code>, <code>.steps</code>, <code>.calls</code> are pandas frames.</div>"
    )
