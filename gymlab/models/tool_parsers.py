"""Tool calls read back from a local model's text, by the tokenizer's template, Hermes or Llama 3 (docs/models.md)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

#: A parser: the model's text -> (the text left, [(name, arguments)]); arguments a dict or a JSON string.
ToolParser = Callable[[str], tuple[str, list[tuple[str, Any]]]]

#: Most tool calls read from one answer; later blocks stay in the text.
MAX_CALLS = 64
_OPEN, _CLOSE = "<tool_call>", "</tool_call>"
_PYTHON_TAG = "<|python_tag|>"


def _call(obj: Any, args_key: str) -> tuple[str, Any] | None:
    """``(name, arguments)`` of a decoded call object, or None when it is not one."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    args = obj.get(args_key, obj.get("arguments"))
    args = {} if args is None else args
    return (obj["name"], args) if isinstance(args, (dict, str)) else None


def loads(text: str) -> Any:
    """``text``'s JSON value, or None when it is invalid or nested deeper than the decoder recurses."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def hermes(text: str) -> tuple[str, list[tuple[str, Any]]]:
    """``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks (Hermes, Qwen 2.5/3)."""
    calls: list[tuple[str, Any]] = []
    kept: list[str] = []
    pos = 0
    while len(calls) < MAX_CALLS:
        start = text.find(_OPEN, pos)
        if start < 0:
            break
        end = text.find(_CLOSE, start + len(_OPEN))
        if end < 0:  # no block closes after here: one scan, then the rest is text
            break
        call = _call(loads(text[start + len(_OPEN) : end]), "arguments")
        if call is None:  # not a call: the block stays text, and the scan goes on after its opening
            kept.append(text[pos : start + len(_OPEN)])
            pos = start + len(_OPEN)
            continue
        calls.append(call)
        kept.append(text[pos:start])
        pos = end + len(_CLOSE)
    kept.append(text[pos:])
    return "".join(kept).strip(), calls


def llama3(text: str) -> tuple[str, list[tuple[str, Any]]]:
    """Llama 3's JSON calls: the whole answer, ``;``-joined, optionally after ``<|python_tag|>``; else text."""
    body = text.strip().removeprefix(_PYTHON_TAG).strip()
    if not body.startswith("{"):
        return text.strip(), []
    decoder, pos = json.JSONDecoder(), 0
    calls: list[tuple[str, Any]] = []
    while pos < len(body) and len(calls) < MAX_CALLS:
        try:
            obj, pos = decoder.raw_decode(body, pos)
        except (ValueError, RecursionError):
            return text.strip(), []
        if (call := _call(obj, "parameters")) is None:
            return text.strip(), []
        calls.append(call)
        while pos < len(body) and body[pos] in " \t\r\n;":
            pos += 1
    if pos < len(body):
        return text.strip(), []
    return "", calls


TOOL_PARSERS: dict[str, ToolParser] = {"hermes": hermes, "llama3": llama3, "none": lambda text: (text.strip(), [])}


def schema_parser(tokenizer: Any) -> ToolParser:
    """transformers' ``tokenizer.parse_response``; an answer it refuses is text with no call."""

    def parse(text: str) -> tuple[str, list[tuple[str, Any]]]:
        try:
            message = tokenizer.parse_response(text, prefix="")
        except (ValueError, RecursionError, TypeError, KeyError):
            return text.strip(), []
        calls = []
        for raw in (message.get("tool_calls") or [])[:MAX_CALLS]:
            if (call := _call(raw.get("function", raw) if isinstance(raw, dict) else None, "arguments")) is None:
                return text.strip(), []
            calls.append(call)
        content = message.get("content")
        return (content if isinstance(content, str) else "").strip(), calls

    return parse


def tool_parser(choice: str | ToolParser, tokenizer: Any) -> ToolParser:
    """The parser ``choice`` names (``"auto"``: the template's, else Llama 3 JSON, else Hermes); a callable as is."""
    if callable(choice):
        return choice
    schema = getattr(tokenizer, "response_template", None) or getattr(tokenizer, "response_schema", None)
    if choice == "auto":
        template = str(getattr(tokenizer, "chat_template", None) or "")
        llama = _PYTHON_TAG in template and _OPEN not in template
        choice = "schema" if schema else "llama3" if llama else "hermes"
    if choice == "schema":
        if not schema:
            raise ValueError("tool_parser='schema' needs a tokenizer with a response_template")
        return schema_parser(tokenizer)
    if choice not in TOOL_PARSERS:
        raise ValueError(
            f"tool_parser {choice!r} is not known; use one of auto, schema, {', '.join(TOOL_PARSERS)}, "
            "or a callable text -> (text, [(name, arguments)])"
        )
    return TOOL_PARSERS[choice]
