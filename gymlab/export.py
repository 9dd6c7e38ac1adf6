"""Rollout records out to JSONL: rollout rows, chat-format SFT rows, RL rows; and back in, validated.

* ``export_rollouts``: the rollout rows of the wire reference (NeMo Gym's keys first, gymlab's
  per-step records after them), readable by ``load`` and by NeMo Gym.
* ``export_sft``: one OpenAI chat-format conversation per episode (``messages`` + ``tools``).
* ``export_rl``: the prompt, the episode's completion and its reward.

Every file is written atomically (``gymlab.jsonl.write_jsonl_atomic``); ``gymlab.collection.dataset``
reads each kind back, validated. Filters (``select``) are explicit arguments:
nothing is dropped unless asked for. No pandas here.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from gymlab.errors import ExportError
from gymlab.jsonl import write_jsonl_atomic
from gymlab.protocol import (
    FunctionCall,
    FunctionCallOutput,
    FunctionTool,
    Message,
    Reasoning,
    ResponseCreateParams,
    Rollout,
)

#: The keys of a NeMo Gym rollout row, in the order it writes them.
ROLLOUT_KEYS = (
    "responses_create_params",
    "response",
    "reward",
    "mask_sample",
    "failure_kind",
    "failure_reason",
    "_ng_task_index",
    "_ng_rollout_index",
    "agent_ref",
)
CHAT_ROLES = {"system", "user", "assistant", "tool"}


# -- records in -------------------------------------------------------------------------------


def as_records(rollouts: Iterable[Rollout | dict] | str | os.PathLike) -> list[Rollout]:
    """Rollout records from records, dicts or a rollouts JSONL path."""
    if isinstance(rollouts, (str, os.PathLike)):
        from gymlab.collection.dataset import read_rollouts

        return read_rollouts(rollouts)
    return [r if isinstance(r, Rollout) else Rollout.model_validate(r) for r in rollouts]


def group_key(record: Rollout) -> Any:
    """What identifies a record's task: ``_ng_task_index`` when present, else the request itself."""
    extra = record.__pydantic_extra__ or {}
    if extra.get("_ng_task_index") is not None:
        return extra["_ng_task_index"]
    return record.responses_create_params.model_dump_json(exclude_none=True)


def select(
    rollouts: Iterable[Rollout | dict],
    *,
    min_reward: float | None = None,
    drop_masked: bool = False,
    best_of_n: int | None = None,
) -> list[Rollout]:
    """The records that pass every filter given, in their original order.

    ``min_reward`` keeps rewards at or above it; ``drop_masked`` drops ``mask_sample`` records;
    ``best_of_n`` keeps the n highest rewards of each task (ties keep the earlier record).
    """
    records = as_records(rollouts)
    keep = [
        (i, r)
        for i, r in enumerate(records)
        if not (drop_masked and r.mask_sample) and (min_reward is None or r.reward >= min_reward)
    ]
    if best_of_n is not None:
        if best_of_n < 1:
            raise ValueError(f"best_of_n must be at least 1, got {best_of_n}")
        groups: dict[Any, list[tuple[int, Rollout]]] = defaultdict(list)
        for i, r in keep:
            groups[group_key(r)].append((i, r))
        chosen = {
            i for group in groups.values() for i, _ in sorted(group, key=lambda ir: (-ir[1].reward, ir[0]))[:best_of_n]
        }
        keep = [(i, r) for i, r in keep if i in chosen]
    return [r for _, r in keep]


# -- rollout rows -----------------------------------------------------------------------------


def rollout_row(record: Rollout, gymlab_fields: bool = True) -> dict[str, Any]:
    """A record as a rollout row: NeMo Gym's keys first.

    ``gymlab_fields=False`` gives NeMo Gym's row alone: no steps, timings or server names, and an
    ``agent_ref`` built from the agent's name when the record has none.
    """
    data = record.model_dump(mode="json")
    row = {k: data.pop(k) for k in ROLLOUT_KEYS if k in data}
    if not gymlab_fields:
        if "agent_ref" not in row and data.get("agent_name"):
            row["agent_ref"] = {"type": "responses_api_agents", "name": data["agent_name"]}
        for key in ("steps", "duration_s", "env_name", "agent_name"):
            data.pop(key, None)
    row.update(data)
    return row


def export_rollouts(
    rollouts: Iterable[Rollout | dict], path: str | os.PathLike, *, gymlab_fields: bool = True, **filters: Any
) -> Path:
    """Write rollout rows to ``path`` atomically (filters as in ``select``; none by default)."""
    records = select(rollouts, **filters) if filters else as_records(rollouts)
    return write_jsonl_atomic(path, (rollout_row(r, gymlab_fields) for r in records))


# -- chat format ------------------------------------------------------------------------------


def chat_tools(tools: Iterable[FunctionTool]) -> list[dict[str, Any]]:
    """Responses-API function tools in the chat format (``{"type":"function","function":{...}}``)."""
    out = []
    for tool in tools:
        function: dict[str, Any] = {
            "name": tool.name,
            "description": tool.description or "",
            "parameters": tool.parameters or {"type": "object", "properties": {}},
        }
        if tool.strict is not None:
            function["strict"] = tool.strict
        out.append({"type": "function", "function": function})
    return out


def chat_messages(items: Iterable[Any], where: str = "") -> list[dict[str, Any]]:
    """Responses-API items as chat messages.

    ``developer`` becomes ``system``; consecutive function calls join one assistant message's
    ``tool_calls`` (after its text, if the same turn had any); outputs become ``tool`` messages;
    reasoning summaries go in ``reasoning_content`` of the assistant message that follows.
    """
    messages: list[dict[str, Any]] = []
    reasoning: list[str] = []
    open_turn = False  # the last message is an assistant message that later calls may join

    def assistant(content: str | None) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if reasoning:
            message["reasoning_content"] = "\n".join(reasoning)
            reasoning.clear()
        return message

    for item in items:
        if isinstance(item, Message):
            if not isinstance(item.content, str) and any(p.text is None for p in item.content):
                kinds = sorted({p.type for p in item.content if p.text is None})
                raise ExportError(
                    f"{where or 'episode'}: a message has {', '.join(kinds)} content, which a "
                    "text chat row cannot hold; filter such episodes out"
                )
            if item.role == "assistant":
                messages.append(assistant(item.text))
                open_turn = True
            else:
                messages.append({"role": "system" if item.role == "developer" else item.role, "content": item.text})
                open_turn = False
        elif isinstance(item, FunctionCall):
            call = {
                "id": item.call_id,
                "type": "function",
                "function": {"name": item.name, "arguments": item.arguments},
            }
            if not (open_turn and messages and messages[-1]["role"] == "assistant"):
                messages.append(assistant(None))
                open_turn = True
            messages[-1].setdefault("tool_calls", []).append(call)
        elif isinstance(item, FunctionCallOutput):
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": item.output})
            open_turn = False
        elif isinstance(item, Reasoning):
            reasoning.append(" ".join(s.text for s in item.summary))
        else:
            raise ExportError(
                f"{where or 'episode'}: item type {getattr(item, 'type', '?')!r} has no chat-format "
                "equivalent; filter such episodes out or convert the item first"
            )
    if reasoning:
        messages.append(assistant(None))
    return messages


def _prompt_items(params: ResponseCreateParams) -> list[Any]:
    items = params.input_items()
    if params.instructions:
        items = [Message(role="system", content=params.instructions), *items]
    return items


def sft_row(record: Rollout, where: str = "") -> dict[str, Any]:
    """One episode as a chat-format SFT row: ``{"messages": [...], "tools": [...]}``."""
    params = record.responses_create_params
    messages = chat_messages([*_prompt_items(params), *record.response.output], where)
    return {"messages": messages, "tools": chat_tools(params.tools)}


def rl_row(record: Rollout, where: str = "") -> dict[str, Any]:
    """One episode as an RL row: the prompt (chat messages), the completion, the reward and the ids."""
    params = record.responses_create_params
    extra = record.__pydantic_extra__ or {}
    return {
        "prompt": chat_messages(_prompt_items(params), where),
        "completion": chat_messages(record.response.output, where),
        "tools": chat_tools(params.tools),
        "reward": record.reward,
        "_ng_task_index": extra.get("_ng_task_index"),
        "_ng_rollout_index": extra.get("_ng_rollout_index"),
    }


def _export(build: Callable[[Rollout, str], dict], rollouts: Any, path: Any, filters: dict) -> Path:
    records = select(rollouts, **filters)
    return write_jsonl_atomic(path, [build(r, f"episode {i}") for i, r in enumerate(records)])


def export_sft(
    rollouts: Iterable[Rollout | dict],
    path: str | os.PathLike,
    *,
    min_reward: float | None = None,
    drop_masked: bool = True,
    best_of_n: int | None = None,
) -> Path:
    """Write chat-format SFT rows atomically; masked episodes are dropped unless ``drop_masked=False``."""
    return _export(
        sft_row, rollouts, path, {"min_reward": min_reward, "drop_masked": drop_masked, "best_of_n": best_of_n}
    )


def export_rl(
    rollouts: Iterable[Rollout | dict],
    path: str | os.PathLike,
    *,
    min_reward: float | None = None,
    drop_masked: bool = True,
    best_of_n: int | None = None,
) -> Path:
    """Write RL rows (prompt, completion, reward) atomically; masked episodes dropped unless asked otherwise."""
    return _export(
        rl_row, rollouts, path, {"min_reward": min_reward, "drop_masked": drop_masked, "best_of_n": best_of_n}
    )
