"""Responses API <-> Chat Completions as pure functions, for requests and chat rows (docs/models.md)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from gymlab.errors import ConversionError
from gymlab.protocol import (
    ContentPart,
    FunctionCall,
    FunctionCallOutput,
    FunctionTool,
    Message,
    NeMoGymResponse,
    Reasoning,
    ResponseCreateParams,
    Usage,
    assistant_message,
    function_call,
    new_id,
)
from gymlab.protocol.responses import InputTokensDetails, OutputTokensDetails, SummaryText

CHAT_ROLES = {"system", "user", "assistant", "tool"}
_TEXT_PARTS = {"input_text", "output_text", "text", "summary_text", "refusal"}
_REFUSED = ("previous_response_id", "prompt", "background")
#: The finish reasons that make an incomplete response, and the reason it gives.
_INCOMPLETE = {"length": "max_output_tokens", "content_filter": "content_filter"}
_THINK = re.compile(r"^\s*<think>(.*?)</think>\s*", re.DOTALL)


def _content(message: Message, where: str) -> str | list[dict]:
    """A message's content in Chat form: a string when it is all text, else Chat content parts."""
    if isinstance(message.content, str):
        return message.content
    parts: list[dict] = []
    for part in message.content:
        if part.type in _TEXT_PARTS:
            refusal = getattr(part, "refusal", None) if part.type == "refusal" else None
            parts.append({"type": "text", "text": refusal or part.text or ""})
        elif part.type == "input_image":
            if not getattr(part, "image_url", None):
                raise ConversionError(f"{where}: an input_image part without image_url has no Chat form")
            detail = {"detail": part.detail} if getattr(part, "detail", None) else {}
            parts.append({"type": "image_url", "image_url": {"url": part.image_url, **detail}})
        else:
            raise ConversionError(f"{where}: content part type {part.type!r} has no Chat Completions form")
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def prompt_items(params: ResponseCreateParams) -> list[Any]:
    """The request's input items, with its ``instructions`` as a leading system message."""
    items = params.input_items()
    if params.instructions:
        items = [Message(role="system", content=params.instructions), *items]
    return items


def chat_messages(
    source: ResponseCreateParams | Iterable[Any], where: str = "", *, request: bool = False, todo: str = ""
) -> list[dict[str, Any]]:
    """Responses-API items (or a request) as Chat messages, for a request or a training row (docs/models.md);
    no Chat form: ``ConversionError`` naming ``where``, the index and what to do."""
    if isinstance(source, ResponseCreateParams):
        items, first, where = prompt_items(source), -1 if source.instructions else 0, where or "input"
    else:
        items, first, where = list(source), 0, where or "items"
    messages: list[dict[str, Any]] = []
    reasoning: list[str] = []

    def assistant(content: Any) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if reasoning:
            message["reasoning_content"] = "\n".join(reasoning)
            reasoning.clear()
        return message

    for n, item in enumerate(items, first):
        at = f"{where}[{n}]" if n >= 0 else f"{where} instructions"
        if isinstance(item, Message):
            content = _content(item, at)
            if not request and not isinstance(content, str):
                raise ConversionError(
                    f"{at}: a message has image content, which a text chat row cannot hold; filter such episodes out"
                )
            role = "system" if item.role == "developer" else item.role
            messages.append(assistant(content) if role == "assistant" else {"role": role, "content": content})
        elif isinstance(item, FunctionCall):
            last = messages[-1] if messages else {}
            if last.get("role") != "assistant" or isinstance(last["content"], list):  # no text turn to join
                last = assistant(None)
                messages.append(last)
            function = {"name": item.name, "arguments": item.arguments}
            last.setdefault("tool_calls", []).append({"id": item.call_id, "type": "function", "function": function})
            if last["content"] == "":
                last["content"] = None
        elif isinstance(item, FunctionCallOutput):
            messages.append({"role": "tool", "tool_call_id": item.call_id, "content": item.output})
        elif isinstance(item, Reasoning):
            if not request:  # Chat endpoints ignore or refuse reasoning in their input (docs/models.md)
                reasoning.append(" ".join(s.text for s in item.summary))
        else:
            hint = todo or (
                "use mode='responses' with an endpoint that serves /v1/responses" if request else "filter it out"
            )
            raise ConversionError(
                f"{at}: item type {getattr(item, 'type', '?')!r} has no Chat Completions form; {hint}"
            )
    if reasoning:
        messages.append(assistant(None))
    return messages


def chat_tools(tools: Iterable[FunctionTool]) -> list[dict[str, Any]]:
    """Responses-API function tools in the Chat form (``{"type": "function", "function": {...}}``)."""
    out = []
    for n, tool in enumerate(tools):
        if tool.type != "function":
            raise ConversionError(f"tools[{n}]: tool type {tool.type!r} has no Chat Completions form")
        function = {
            "name": tool.name,
            "description": tool.description or "",
            "parameters": tool.parameters or {"type": "object", "properties": {}},
            **({} if tool.strict is None else {"strict": tool.strict}),
        }
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, str) or choice is None:
        return choice
    if isinstance(choice, dict) and choice.get("type") == "function":
        name = choice.get("name") or (choice.get("function") or {}).get("name")
        return {"type": "function", "function": {"name": name}}
    raise ConversionError(f"tool_choice {choice!r} has no Chat Completions form")


def _response_format(text: dict) -> dict | None:
    fmt = (text or {}).get("format")
    if not fmt or fmt.get("type") == "text":
        return None
    if fmt.get("type") == "json_object":
        return {"type": "json_object"}
    if fmt.get("type") == "json_schema":
        schema = {k: fmt[k] for k in ("name", "schema", "strict", "description") if k in fmt}
        return {"type": "json_schema", "json_schema": schema}
    raise ConversionError(f"text.format type {fmt.get('type')!r} has no Chat Completions form")


def chat_request(params: ResponseCreateParams, model: str = "", extra_body: dict | None = None) -> dict:
    """The ``/chat/completions`` body for ``params``; ``model`` wins, ``extra_body`` is merged last."""
    for key in _REFUSED:
        if getattr(params, key) is not None:
            raise ConversionError(f"{key} has no Chat Completions form; use mode='responses'")
    tools = chat_tools(params.tools)
    body: dict[str, Any] = {"model": model or params.model or "", "messages": chat_messages(params, request=True)}
    if tools:
        body["tools"] = tools
        body["tool_choice"] = _tool_choice(params.tool_choice)
        body["parallel_tool_calls"] = params.parallel_tool_calls
    elif params.tool_choice not in (None, "auto", "none"):
        raise ConversionError(f"tool_choice {params.tool_choice!r} needs tools, and the request has none")
    for key in ("temperature", "top_p", "max_output_tokens", "user", "service_tier"):
        if (value := getattr(params, key)) is not None:
            body["max_tokens" if key == "max_output_tokens" else key] = value
    if params.top_logprobs is not None:
        body.update(logprobs=True, top_logprobs=params.top_logprobs)
    if params.reasoning and params.reasoning.get("effort"):
        body["reasoning_effort"] = params.reasoning["effort"]
    if params.text and (fmt := _response_format(params.text)):
        body["response_format"] = fmt
    body.update(extra_body or {})
    return body


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text") or "" for p in content if isinstance(p, dict))
    raise ConversionError(f"message content of type {type(content).__name__} is not text")


def _usage(raw: dict | None) -> Usage | None:
    if not raw:
        return None
    i, o = int(raw.get("prompt_tokens") or 0), int(raw.get("completion_tokens") or 0)
    prompt = raw.get("prompt_tokens_details") or {}
    reasoning = ((raw.get("completion_tokens_details") or {}).get("reasoning_tokens")) or 0
    return Usage(
        input_tokens=i,
        output_tokens=o,
        total_tokens=int(raw.get("total_tokens") or i + o),
        # cache_write_tokens: the current Responses usage carries it (the official client requires it)
        input_tokens_details=InputTokensDetails(
            cached_tokens=int(prompt.get("cached_tokens") or 0),
            cache_write_tokens=int(prompt.get("cache_write_tokens") or 0),
        ),
        output_tokens_details=OutputTokensDetails(reasoning_tokens=int(reasoning)),
    )


def _function_call(raw: dict, n: int) -> FunctionCall:
    fn = raw.get("function") or {}
    if not fn.get("name"):
        raise ConversionError(f"choices[0].message.tool_calls[{n}] has no function name: {json.dumps(raw)[:200]}")
    args = fn.get("arguments")
    return function_call(fn["name"], "{}" if args is None else args, raw.get("id"))  # some send an object


def response_from_chat(body: dict, params: ResponseCreateParams | None = None) -> NeMoGymResponse:
    """A ``/chat/completions`` answer as a Responses ``response`` (echoing ``params``' tools)."""
    if not isinstance(body, dict):
        raise ConversionError(f"the answer is a {type(body).__name__}, not a chat.completion object")
    choices = body.get("choices")
    if not choices:
        raise ConversionError(f"the answer has no choices: {json.dumps(body)[:300]}")
    choice = choices[0]
    message = choice.get("message") or {}
    text = _text_of(message.get("content"))
    thinking = message.get("reasoning_content") or message.get("reasoning")
    if not thinking and (m := _THINK.match(text)):
        thinking, text = m.group(1).strip(), text[m.end() :]

    output: list[Any] = []
    if thinking:
        output.append(Reasoning(id=new_id("rs"), summary=[SummaryText(type="summary_text", text=thinking)]))
    if text:
        output.append(assistant_message(text))
    if message.get("refusal"):
        refusal = ContentPart(type="refusal", refusal=message["refusal"])
        output.append(Message(id=new_id("msg"), role="assistant", status="completed", content=[refusal]))
    calls = list(message.get("tool_calls") or [])
    if message.get("function_call"):  # the pre-tools form some servers still send
        calls.append({"id": None, "type": "function", "function": message["function_call"]})
    output.extend(_function_call(c, n) for n, c in enumerate(calls))

    finish = choice.get("finish_reason")
    reason = _INCOMPLETE.get(finish) if isinstance(finish, str) else None
    incomplete = {"reason": reason} if reason else None
    echoed = ("tools", "tool_choice", "parallel_tool_calls") if params is not None else ()
    return NeMoGymResponse(
        **({"created_at": int(body["created"])} if body.get("created") else {}),
        model=body.get("model") or "",
        output=output,
        usage=_usage(body.get("usage")),
        incomplete_details=incomplete,
        status="incomplete" if incomplete else "completed",
        **{key: getattr(params, key) for key in echoed},
    )
