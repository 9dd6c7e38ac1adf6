"""Steps of a record written without them (NeMo Gym's agents write none), from its ``response.output``."""

from __future__ import annotations

import re
from typing import Any

_TOOL_OUTPUTS = frozenset(
    {"function_call_output", "mcp_call_output", "custom_tool_call_output", "computer_call_output"}
)
_CALLS = frozenset({"function_call", "mcp_call", "custom_tool_call", "computer_call"})


def _flat(items: Any) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for item in items if isinstance(items, list) else ():
        if isinstance(item, list):  # some agents write a turn's items as one nested list
            out.extend(_flat(item))
        elif isinstance(item, dict):
            out.append(item)
    return out


def item_text(item: dict[str, Any]) -> str | None:
    """A message item's text (its content string, or its parts' texts joined); None for other items."""
    if item.get("type", "message") != "message":
        return None
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "".join(p.get("text") or "" for p in content or () if isinstance(p, dict))


def derived_steps(record: dict[str, Any]) -> list[dict[str, Any]]:
    """A record's steps from its ``response.output``: a model turn and what answers it; the last has the reward."""
    steps: list[dict[str, Any]] = []
    step: dict[str, Any] | None = None
    closed = True  # the current step got its outputs or observation: the next model item starts another
    for item in _flat((record.get("response") or {}).get("output")):
        kind = item.get("type", "message")
        if kind in _TOOL_OUTPUTS and step is not None:
            step["tool_outputs"].append(item)
            closed = True
        elif kind == "message" and item.get("role") == "user":
            if step is not None:
                step["observation"] = (step.get("observation") or "") + (item_text(item) or "")
                closed = True
        else:
            if closed or step is None:
                step = {"index": len(steps), "action": [], "tool_outputs": [], "reward": 0.0}
                steps.append(step)
                closed = False
            step["action"].append(item)
    if steps:
        last = steps[-1]
        last["reward"] = float(record.get("reward") or 0.0)
        terminated = record.get("terminated")
        if not isinstance(terminated, bool):
            terminated = not any(i.get("type") in _CALLS for i in last["action"]) and not record.get("truncated")
        last["terminated"] = terminated
        last["truncated"] = bool(record.get("truncated"))
    return steps


#: A list under a ``steps`` key in a JSON line (quotes inside strings are escaped: only a key matches).
_STEPS_KEY = re.compile(rb'"steps"\s*:\s*\[')
#: The steps key as gymlab's writer and ``json.dumps`` spell it: where a store's lines are searched for it.
STEPS_KEY = b'"steps":'


def has_steps(buffer: bytes, start: int = 0, end: int | None = None) -> bool:
    """Whether the JSON line ``buffer[start:end]`` holds a list under a ``steps`` key (the writers' spellings first)."""
    end = len(buffer) if end is None else end
    if buffer.find(b'"steps":[', start, end) >= 0 or buffer.find(b'"steps": [', start, end) >= 0:
        return True
    return buffer.find(b'"steps"', start, end) >= 0 and _STEPS_KEY.search(buffer, start, end) is not None
