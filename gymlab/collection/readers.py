"""JSONL rows back in, validated by kind; ``Dataset``: task rows to run or write; dataset metrics."""

from __future__ import annotations

import json
import os
import statistics
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gymlab.errors import DatasetError
from gymlab.jsonl import iter_jsonl, write_jsonl_atomic
from gymlab.models.chat_convert import CHAT_ROLES
from gymlab.protocol import ResponseCreateParams, Rollout
from gymlab.protocol.validation import describe_validation


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
            if (
                m["role"] != "assistant"
                or not isinstance(fn, dict)
                or not isinstance(call.get("id"), str)
                or call.get("type") != "function"
                or not isinstance(fn.get("name"), str)
                or not isinstance(fn.get("arguments"), str)
            ):
                raise ValueError(
                    f"{at}.tool_calls[{c}]: expected an assistant's "
                    '{"id", "type": "function", "function": {"name", "arguments": str}}'
                )
            call_ids.add(call["id"])
        if m["role"] == "tool" and m.get("tool_call_id") not in call_ids:
            raise ValueError(
                f"{at}: tool message answers tool_call_id {m.get('tool_call_id')!r}, "
                "which no earlier assistant message called"
            )
        if m["role"] == "assistant" and content is None and not m.get("tool_calls") and "reasoning_content" not in m:
            raise ValueError(f"{at}: an assistant message needs content or tool_calls")


def check_tools(tools: Any, key: str = "tools") -> None:
    """Raise ``ValueError`` unless ``tools`` is a list of chat-format function tool schemas."""
    if not isinstance(tools, list) or not all(
        isinstance(t, dict)
        and t.get("type") == "function"
        and isinstance(t.get("function"), dict)
        and isinstance(t["function"].get("name"), str)
        for t in tools
    ):
        raise ValueError(f'{key} must be a list of {{"type": "function", "function": {{"name", ...}}}}')


def validate_sft_row(row: dict) -> None:
    check_chat_messages(row.get("messages"))
    check_tools(row.get("tools", []))


def validate_rl_row(row: dict) -> None:
    check_chat_messages(row.get("prompt"), "prompt")
    check_chat_messages(row.get("completion", []), "completion")
    check_tools(row.get("tools", []))
    reward = row.get("reward")
    if isinstance(reward, bool) or not isinstance(reward, (int, float)):
        raise ValueError(f"reward must be a number, got {reward!r}")


def task_params(row: dict) -> ResponseCreateParams:
    """A task row's ``responses_create_params``, validated (``ValueError`` saying what is wrong)."""
    if "responses_create_params" not in row:
        raise ValueError(
            "missing 'responses_create_params' (the model request of the row); "
            f"keys present: {', '.join(sorted(row)) or 'none'}"
        )
    try:
        return ResponseCreateParams.model_validate(row["responses_create_params"])
    except ValidationError as exc:
        raise ValueError(f"invalid responses_create_params: {describe_validation(exc)}") from None


#: Each kind's check (a rollout row is read as its ``Rollout``, the others stay dicts) and its name.
_VALIDATORS: dict[str, tuple[Callable[[dict], Any], str]] = {
    "rollout": (Rollout.model_validate, "a rollout row"),
    "sft": (validate_sft_row, "a chat-format SFT row"),
    "rl": (validate_rl_row, "an RL row"),
    "task": (task_params, "a task row"),
}


def kind_of(row: dict) -> str:
    """Which kind of row this is: rollout, sft, rl or task (from its keys)."""
    if "messages" in row:
        return "sft"
    if "response" in row:  # before rl: a rollout may carry its row's own ``prompt`` field
        return "rollout"
    if "prompt" in row and "reward" in row:
        return "rl"
    return "task"


def read_jsonl(path: str | os.PathLike, kind: str | None = None) -> list[Any]:
    """Every line, validated as ``kind`` (rollout: as ``Rollout`` records; sft, rl, task; None: the first
    row's kind); a bad line is a ``DatasetError`` naming it."""
    if kind is not None and kind not in _VALIDATORS:
        raise ValueError(f"kind must be one of {', '.join(_VALIDATORS)} or None, got {kind!r}")
    out = []
    for number, row in iter_jsonl(path):
        kind = kind or kind_of(row)
        validate, what = _VALIDATORS[kind]
        try:
            value = validate(row)
        except ValidationError as exc:
            raise DatasetError(str(path), number, f"not {what}: {describe_validation(exc, 'row')}") from None
        except ValueError as exc:
            raise DatasetError(str(path), number, f"not {what}: {exc}") from None
        out.append(value if kind == "rollout" else row)
    return out


def _plain(value: Any) -> Any:
    """pandas/numpy values as JSON values (numpy scalars unwrapped, NaN/NaT/NA as None)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist") and not isinstance(value, (str, bytes)):  # numpy arrays and scalars
        return _plain(value.tolist())
    if (isinstance(value, float) and value != value) or type(value).__name__ in ("NAType", "NaTType"):
        return None
    return value


class Dataset:
    """Task rows (``responses_create_params`` + metadata) from dicts or a DataFrame, validated, ready to
    run or write. ``prompt="column"`` builds each request from that column (with ``system``, ``tools`` and
    other request ``params``); the other columns stay as the row's metadata (docs/collection.md)."""

    def __init__(
        self,
        data: Any = (),
        *,
        prompt: str | None = None,
        system: str | None = None,
        tools: list[dict] | None = None,
        name: str = "dataset",
        **params: Any,
    ):
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
                    [{"role": "user", "content": text}] if isinstance(text, str) else text
                )
                row["responses_create_params"] = {"input": items, **({"tools": tools} if tools else {}), **params}
            try:
                request = task_params(row)
                json.dumps(row)
            except (TypeError, ValueError) as exc:
                raise DatasetError(name, n, f"not a task row: {exc}") from None
            self.rows.append({**row, "responses_create_params": request.model_dump(mode="json", exclude_unset=True)})

    @classmethod
    def load(cls, path: str | os.PathLike) -> Dataset:
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


def dataset_metrics(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Counts over ``rows``: all rows, their fields, and response figures where the params validate."""
    n_rows, fields, invalid, missing = 0, Counter(), 0, 0
    items, tools, settings = [], Counter(), Counter()
    for row in rows:
        n_rows += 1
        fields.update(k for k in row if k != "responses_create_params")
        raw = row.get("responses_create_params")
        if raw is None:
            missing += 1
            continue
        try:
            params = ResponseCreateParams.model_validate(raw)
        except ValidationError:
            invalid += 1
            continue
        items.append(len(params.input_items()))
        tools.update(t.name for t in params.tools or ())
        settings.update(k for k in ("temperature", "top_p", "max_output_tokens", "seed") if raw.get(k) is not None)
    metrics: dict[str, Any] = {
        "num_rows": n_rows,
        "fields": dict(sorted(fields.items())),
        "num_rows_with_responses_create_params": len(items),
        "num_rows_without_responses_create_params": missing,
        "num_rows_with_invalid_responses_create_params": invalid,
    }
    if items:
        metrics["responses"] = {
            "input_items": {"min": min(items), "mean": statistics.fmean(items), "max": max(items)},
            "tools": dict(sorted(tools.items())),
            "sampling_settings": dict(sorted(settings.items())),
        }
    return metrics


def file_metrics(path: str | os.PathLike) -> dict[str, Any]:
    """``dataset_metrics`` of a JSONL file (a bad line is a ``DatasetError`` naming it)."""
    return dataset_metrics(row for _, row in iter_jsonl(path))
