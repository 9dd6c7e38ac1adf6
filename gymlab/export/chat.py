"""Responses-API items as chat-format messages and tools (the OpenAI chat shape the trainers read)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gymlab.errors import ExportError
from gymlab.protocol import FunctionCall, FunctionCallOutput, FunctionTool, Message, Reasoning, ResponseCreateParams

CHAT_ROLES = {"system", "user", "assistant", "tool"}


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


def prompt_items(params: ResponseCreateParams) -> list[Any]:
    """The request's input items, with its ``instructions`` as a leading system message."""
    items = params.input_items()
    if params.instructions:
        items = [Message(role="system", content=params.instructions), *items]
    return items
