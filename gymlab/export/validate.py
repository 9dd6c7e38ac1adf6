"""Checks of one trainer-format row as a reader gets it back; each raises ``ValueError`` saying why."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from gymlab.collection.readers import check_chat_messages


def _messages(row: dict, key: str) -> None:
    value = row.get(key)
    if isinstance(value, list):  # Parquet and `datasets` give every struct field; a null one was absent
        value = [
            {k: v for k, v in m.items() if v is not None or k == "content"} if isinstance(m, dict) else m for m in value
        ]
    check_chat_messages(value, key)
    if not value:
        raise ValueError(f"{key} is empty: it needs at least one message")


def _tools(value: Any, key: str = "tools") -> None:
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a JSON string of tool schemas, got {type(value).__name__}")
    try:
        tools = json.loads(value)
    except ValueError as exc:
        raise ValueError(f"{key} is not valid JSON: {exc}") from None
    if not isinstance(tools, list) or not all(
        isinstance(t, dict) and t.get("type") == "function" and isinstance((t.get("function") or {}).get("name"), str)
        for t in tools
    ):
        raise ValueError(f'{key} must be a JSON list of {{"type": "function", "function": {{"name", ...}}}}')


def _number(row: dict, key: str) -> float:
    value = row.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ValueError(f"{key} must be a number, got {value!r}")
    return float(value)


def _string(row: dict, key: str, *, optional: bool = False) -> None:
    if not isinstance(row.get(key), str) and not (optional and row.get(key) is None):
        raise ValueError(f"{key} must be a string{' or null' * optional}, got {row.get(key)!r:.80}")


def _token_turns(row: dict) -> None:
    """An episode's ``token_turns``, when it has them: per model turn, token ids and one logprob per token."""
    turns = row.get("token_turns")
    if turns is None:
        return
    if not isinstance(turns, list):
        raise ValueError(f"token_turns must be a list, got {type(turns).__name__}")
    for n, turn in enumerate(turns):
        ids, logprobs = (turn or {}).get("generation_token_ids"), (turn or {}).get("generation_log_probs")
        if not isinstance(ids, list) or not isinstance(logprobs, list) or len(ids) != len(logprobs):
            raise ValueError(f"token_turns[{n}] needs generation_token_ids and as many generation_log_probs")


def sft(row: dict) -> None:
    _token_turns(row)
    _messages(row, "messages")
    if not any(m.get("role") == "assistant" for m in row["messages"]):
        raise ValueError("messages has no assistant message: nothing to train on")
    _tools(row.get("tools"))


def dpo(row: dict) -> None:
    for key in ("prompt", "chosen", "rejected"):
        _messages(row, key)
    _tools(row.get("tools"))
    chosen, rejected = _number(row, "score_chosen"), _number(row, "score_rejected")
    if not chosen > rejected:
        raise ValueError(f"score_chosen {chosen} is not above score_rejected {rejected}")


def kto(row: dict) -> None:
    _token_turns(row)
    _messages(row, "prompt")
    _messages(row, "completion")
    if not isinstance(row.get("label"), bool):
        raise ValueError(f"label must be true or false, got {row.get('label')!r}")
    _tools(row.get("tools"))
    _number(row, "reward")


def grpo(row: dict) -> None:
    _messages(row, "prompt")
    _string(row, "ground_truth", optional=True)  # null: a task row without fields of its own
    _tools(row.get("tools"))
    if row.get("reward_mean") is not None:  # null: unset
        _number(row, "reward_mean")


def verl(row: dict) -> None:
    _string(row, "data_source")
    _messages(row, "prompt")
    _string(row, "ability")
    reward_model = row.get("reward_model")
    if not isinstance(reward_model, dict) or not isinstance(reward_model.get("style"), str):
        raise ValueError(f"reward_model must be {{style, ground_truth}}, got {reward_model!r:.80}")
    _string(reward_model, "ground_truth", optional=True)
    extra = row.get("extra_info")
    if not isinstance(extra, dict) or not isinstance(extra.get("index"), int):
        raise ValueError(f"extra_info must be an object with an integer index, got {extra!r:.80}")
    _tools(extra.get("tools"), "extra_info.tools")


CHECKS: dict[str, Callable[[dict], None]] = {
    "trl-sft": sft,
    "trl-dpo": dpo,
    "trl-kto": kto,
    "trl-grpo": grpo,
    "verl": verl,
}


#: The columns that tell each format, asked in this order (a verl row also has a ground truth).
_TELLING = (
    ("trl-sft", {"messages"}),
    ("trl-dpo", {"chosen", "rejected"}),
    ("trl-kto", {"label"}),
    ("verl", {"data_source", "reward_model"}),
    ("trl-grpo", {"ground_truth"}),
)


def format_of(columns: set[str]) -> str | None:
    """Which trainer format a set of columns is (None: none of them)."""
    return next((name for name, telling in _TELLING if telling <= columns), None)
