"""Rollout records out to JSONL: rollout rows, chat-format SFT rows, RL rows; and back in, validated.

* ``export_rollouts``: the rollout rows of the wire reference (NeMo Gym's keys first, gymlab's
  per-step records after them), readable by ``load`` and by NeMo Gym.
* ``export_sft``: one OpenAI chat-format conversation per episode (``messages`` + ``tools``).
* ``export_rl``: the prompt, the episode's completion and its reward.

Every file is written atomically (``write_jsonl_atomic``) and every reader validates each line,
raising ``DatasetError`` with the file and line number. Filters (``select``) are explicit arguments:
nothing is dropped unless asked for. No pandas here.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path
from typing import Any, Callable, Iterable

from pydantic import ValidationError

from gymlab.errors import DatasetError, GymlabError
from gymlab.protocol import (
    FunctionCall,
    FunctionCallOutput,
    FunctionTool,
    Message,
    Reasoning,
    ResponseCreateParams,
    Rollout,
)
from gymlab.rollout_files import iter_jsonl, write_jsonl_atomic

#: The keys of a NeMo Gym rollout row, in the order it writes them.
ROLLOUT_KEYS = ("responses_create_params", "response", "reward", "mask_sample", "failure_kind", "failure_reason",
                "_ng_task_index", "_ng_rollout_index", "agent_ref")
#: What a rollout record adds to its dataset row (everything else in a record came from the row).
RESULT_KEYS = frozenset({"response", "reward", "mask_sample", "failure_kind", "failure_reason", "steps",
                         "duration_s", "env_name", "agent_name"})
CHAT_ROLES = {"system", "user", "assistant", "tool"}


class ExportError(GymlabError):
    """Raised when a record cannot be written in the requested format (the message names the episode)."""


# -- records in -------------------------------------------------------------------------------

def as_records(rollouts: Iterable[Rollout | dict] | str | os.PathLike) -> list[Rollout]:
    """Rollout records from records, dicts or a rollouts JSONL path."""
    if isinstance(rollouts, (str, os.PathLike)):
        return read_rollouts(rollouts)
    return [r if isinstance(r, Rollout) else Rollout.model_validate(r) for r in rollouts]


def task_key(record: Rollout) -> Any:
    """What identifies a record's task: ``_ng_task_index`` when present, else the request itself."""
    extra = record.__pydantic_extra__ or {}
    if extra.get("_ng_task_index") is not None:
        return extra["_ng_task_index"]
    return record.responses_create_params.model_dump_json(exclude_none=True)


def select(rollouts: Iterable[Rollout | dict], *, min_reward: float | None = None, drop_masked: bool = False,
           best_of_n: int | None = None) -> list[Rollout]:
    """The records that pass every filter given, in their original order.

    ``min_reward`` keeps rewards at or above it; ``drop_masked`` drops ``mask_sample`` records;
    ``best_of_n`` keeps the n highest rewards of each task (ties keep the earlier record).
    """
    records = as_records(rollouts)
    keep = [(i, r) for i, r in enumerate(records)
            if not (drop_masked and r.mask_sample) and (min_reward is None or r.reward >= min_reward)]
    if best_of_n is not None:
        if best_of_n < 1:
            raise ValueError(f"best_of_n must be at least 1, got {best_of_n}")
        groups: dict[Any, list[tuple[int, Rollout]]] = defaultdict(list)
        for i, r in keep:
            groups[task_key(r)].append((i, r))
        chosen = {i for group in groups.values()
                  for i, _ in sorted(group, key=lambda ir: (-ir[1].reward, ir[0]))[:best_of_n]}
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


def export_rollouts(rollouts: Iterable[Rollout | dict], path: str | os.PathLike, *, gymlab_fields: bool = True,
                    **filters: Any) -> Path:
    """Write rollout rows to ``path`` atomically (filters as in ``select``; none by default)."""
    records = select(rollouts, **filters) if filters else as_records(rollouts)
    return write_jsonl_atomic(path, (rollout_row(r, gymlab_fields) for r in records))


# -- chat format ------------------------------------------------------------------------------

def chat_tools(tools: Iterable[FunctionTool]) -> list[dict[str, Any]]:
    """Responses-API function tools in the chat format (``{"type":"function","function":{...}}``)."""
    out = []
    for tool in tools:
        function: dict[str, Any] = {"name": tool.name, "description": tool.description or "",
                                    "parameters": tool.parameters or {"type": "object", "properties": {}}}
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
                raise ExportError(f"{where or 'episode'}: a message has {', '.join(kinds)} content, which a "
                                  "text chat row cannot hold; filter such episodes out")
            if item.role == "assistant":
                messages.append(assistant(item.text))
                open_turn = True
            else:
                messages.append({"role": "system" if item.role == "developer" else item.role, "content": item.text})
                open_turn = False
        elif isinstance(item, FunctionCall):
            call = {"id": item.call_id, "type": "function",
                    "function": {"name": item.name, "arguments": item.arguments}}
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
            raise ExportError(f"{where or 'episode'}: item type {getattr(item, 'type', '?')!r} has no chat-format "
                              "equivalent; filter such episodes out or convert the item first")
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


def export_sft(rollouts: Iterable[Rollout | dict], path: str | os.PathLike, *, min_reward: float | None = None,
               drop_masked: bool = True, best_of_n: int | None = None) -> Path:
    """Write chat-format SFT rows atomically; masked episodes are dropped unless ``drop_masked=False``."""
    return _export(sft_row, rollouts, path, {"min_reward": min_reward, "drop_masked": drop_masked,
                                             "best_of_n": best_of_n})


def export_rl(rollouts: Iterable[Rollout | dict], path: str | os.PathLike, *, min_reward: float | None = None,
              drop_masked: bool = True, best_of_n: int | None = None) -> Path:
    """Write RL rows (prompt, completion, reward) atomically; masked episodes dropped unless asked otherwise."""
    return _export(rl_row, rollouts, path, {"min_reward": min_reward, "drop_masked": drop_masked,
                                            "best_of_n": best_of_n})


# -- reading back, validated ------------------------------------------------------------------

def _describe(exc: ValidationError) -> str:
    first = exc.errors()[0]
    loc = ".".join(str(p) for p in first.get("loc", ())) or "row"
    if first.get("type") == "extra_forbidden":
        return f"unknown key {loc!r}"
    return f"{loc}: {first.get('msg')}"


def _pydantic_cause(exc: ValidationError, what: str) -> str:
    return f"not {what}: {_describe(exc)}"


def check_chat_messages(messages: Any, key: str = "messages") -> None:
    """Raise ``ValueError`` unless ``messages`` is a well-formed chat conversation."""
    if not isinstance(messages, list):
        raise ValueError(f"{key} must be a list of messages, got {type(messages).__name__}")
    call_ids: set[str] = set()
    for n, m in enumerate(messages):
        at = f"{key}[{n}]"
        if not isinstance(m, dict) or m.get("role") not in CHAT_ROLES:
            raise ValueError(f"{at}: expected a message with role one of {sorted(CHAT_ROLES)}, got {m!r:.80}")
        content = m.get("content")
        if content is not None and not isinstance(content, str):
            raise ValueError(f"{at}.content must be a string or null")
        for c, call in enumerate(m.get("tool_calls") or []):
            fn = call.get("function") if isinstance(call, dict) else None
            if (m["role"] != "assistant" or not isinstance(fn, dict) or not isinstance(call.get("id"), str)
                    or call.get("type") != "function" or not isinstance(fn.get("name"), str)
                    or not isinstance(fn.get("arguments"), str)):
                raise ValueError(f"{at}.tool_calls[{c}]: expected an assistant's "
                                 '{"id", "type": "function", "function": {"name", "arguments": str}}')
            call_ids.add(call["id"])
        if m["role"] == "tool" and m.get("tool_call_id") not in call_ids:
            raise ValueError(f"{at}: tool message answers tool_call_id {m.get('tool_call_id')!r}, "
                             "which no earlier assistant message called")
        if m["role"] == "assistant" and content is None and not m.get("tool_calls") and "reasoning_content" not in m:
            raise ValueError(f"{at}: an assistant message needs content or tool_calls")


def _check_tools(tools: Any) -> None:
    if not isinstance(tools, list) or not all(
            isinstance(t, dict) and t.get("type") == "function" and isinstance(t.get("function"), dict)
            and isinstance(t["function"].get("name"), str) for t in tools):
        raise ValueError('tools must be a list of {"type": "function", "function": {"name", ...}}')


def validate_sft_row(row: dict) -> dict:
    check_chat_messages(row.get("messages"))
    _check_tools(row.get("tools", []))
    return row


def validate_rl_row(row: dict) -> dict:
    check_chat_messages(row.get("prompt"), "prompt")
    check_chat_messages(row.get("completion", []), "completion")
    _check_tools(row.get("tools", []))
    reward = row.get("reward")
    if isinstance(reward, bool) or not isinstance(reward, (int, float)):
        raise ValueError(f"reward must be a number, got {reward!r}")
    return row


def validate_task_row(row: dict) -> dict:
    """A task row needs ``responses_create_params`` that ``ResponseCreateParams`` accepts."""
    if "responses_create_params" not in row:
        raise ValueError("a task row needs responses_create_params (the model request)")
    try:
        ResponseCreateParams.model_validate(row["responses_create_params"])
    except ValidationError as exc:
        raise ValueError(f"responses_create_params: {_describe(exc)}") from None
    return row


_VALIDATORS: dict[str, tuple[Callable[[dict], Any], str]] = {
    "rollout": (Rollout.model_validate, "a rollout row"),
    "sft": (validate_sft_row, "a chat-format SFT row"),
    "rl": (validate_rl_row, "an RL row"),
    "task": (validate_task_row, "a task row"),
}


def kind_of(row: dict) -> str:
    """Which kind of row this is: rollout, sft, rl or task (from its keys)."""
    if "messages" in row:
        return "sft"
    if "prompt" in row and "reward" in row:
        return "rl"
    if "response" in row:
        return "rollout"
    return "task"


def read_jsonl(path: str | os.PathLike, kind: str | None = None) -> list[Any]:
    """Read and validate every line: ``kind`` is rollout, sft, rl or task (None: from the first row).

    Rollout rows come back as ``Rollout`` records, the others as dicts. A torn, invalid or
    wrong-shaped line raises ``DatasetError`` with the file and line number.
    """
    if kind is not None and kind not in _VALIDATORS:
        raise ValueError(f"kind must be one of {', '.join(_VALIDATORS)} or None, got {kind!r}")
    out = []
    for number, row in iter_jsonl(path):
        kind = kind or kind_of(row)
        validate, what = _VALIDATORS[kind]
        try:
            value = validate(row)
        except ValidationError as exc:
            raise DatasetError(str(path), number, _pydantic_cause(exc, what)) from None
        except ValueError as exc:
            raise DatasetError(str(path), number, f"not {what}: {exc}") from None
        out.append(value)
    return out


def read_rollouts(path: str | os.PathLike) -> list[Rollout]:
    return read_jsonl(path, "rollout")


def load(path: str | os.PathLike, kind: str | None = None):
    """Read a JSONL file written by gymlab or NeMo Gym; rollout files give ``Rollouts`` (with frames)."""
    rows = read_jsonl(path, kind)
    if rows and isinstance(rows[0], Rollout):
        from gymlab.lab.runs import Rollouts

        return Rollouts(rows)
    return rows


# -- task datasets ----------------------------------------------------------------------------

def _plain(value: Any) -> Any:
    """pandas/numpy values as JSON values (numpy scalars unwrapped, NaN/NaT/NA as None)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # numpy arrays and scalars
        return _plain(value.tolist())
    if isinstance(value, float) and value != value:
        return None
    if type(value).__name__ in ("NAType", "NaTType"):
        return None
    return value


class Dataset:
    """Task rows (``responses_create_params`` + metadata), validated, ready to run or write.

    Build from a list of dicts or a pandas DataFrame. With ``prompt="column"``, each row's request
    is built from that column (plus ``system``, ``tools`` and any other request ``params``); the other
    columns stay as row metadata (what the environment's seed/verify read).

    >>> ds = Dataset(frame, prompt="question", tools=[square_tool])
    >>> ds.write("data/train.jsonl")
    """

    def __init__(self, data: Any = (), *, prompt: str | None = None, system: str | None = None,
                 tools: list[dict] | None = None, name: str = "dataset", **params: Any):
        self.name = name
        records = data.to_dict("records") if hasattr(data, "to_dict") and hasattr(data, "columns") else list(data)
        self.rows: list[dict[str, Any]] = []
        for n, raw in enumerate(records, 1):
            row = _plain(dict(raw))
            if prompt is not None:
                text = row.pop(prompt, None)
                if not isinstance(text, (str, list)):
                    raise DatasetError(name, n, f"column {prompt!r} must hold the prompt text, got {text!r:.80}")
                items = ([{"role": "system", "content": system}] if system else []) + (
                    [{"role": "user", "content": text}] if isinstance(text, str) else text)
                row["responses_create_params"] = {"input": items, **({"tools": tools} if tools else {}), **params}
            self.rows.append(self._validated(row, n))

    def _validated(self, row: dict, n: int) -> dict:
        try:
            validate_task_row(row)
            json.dumps(row)
        except (TypeError, ValueError) as exc:
            raise DatasetError(self.name, n, f"not a task row: {exc}") from None
        params = ResponseCreateParams.model_validate(row["responses_create_params"])
        return {**row, "responses_create_params": params.model_dump(mode="json", exclude_unset=True)}

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Dataset":
        """Read a task-rows JSONL file (line-numbered errors)."""
        return cls(read_jsonl(path, "task"), name=str(path))

    def write(self, path: str | os.PathLike) -> Path:
        """Write the rows atomically, one JSON object a line."""
        return write_jsonl_atomic(path, self.rows)

    def to_frame(self):
        """The rows as a pandas DataFrame (one column per top-level key)."""
        import pandas as pd

        return pd.DataFrame(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self):
        return iter(self.rows)

    def __getitem__(self, index):
        return self.rows[index]

    def __repr__(self) -> str:
        return f"<Dataset {self.name}: {len(self.rows)} rows>"
