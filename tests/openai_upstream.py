"""OpenAIUpstream: a local OpenAI-compatible endpoint whose answers come from a rule-based policy.

It serves ``POST /v1/responses``, ``POST /v1/chat/completions`` and ``GET /v1/models`` in OpenAI's wire
format, error bodies included (``{"error": {"message", "type", "param", "code"}}``), so model proxies
can be tested over real HTTP with no external service. Faults are configurable: require an API key,
fail the next N requests with a status (and a ``Retry-After``), delay answers, reason out loud.

>>> up = lab.serve(OpenAIUpstream, policy=calculator.policy, api_key="sk-test")
>>> up.server.inject(fail_times=2, fail_status=429, retry_after=0)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Any, Literal

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from gymlab.protocol import (
    FunctionCall,
    FunctionCallOutput,
    FunctionTool,
    Message,
    NeMoGymResponse,
    Reasoning,
    ResponseCreateParams,
    assistant_message,
    new_id,
)
from gymlab.server import BaseServer

_STATUS_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    404: "invalid_request_error",
    429: "requests",
    500: "server_error",
    502: "server_error",
    503: "server_error",
}
_STATUS_MESSAGES = {
    429: "Rate limit reached for requests. Please try again later.",
    500: "The server had an error while processing your request. Sorry about that!",
    502: "Bad gateway.",
    503: "The engine is currently overloaded, please try again later.",
}


# --- the Chat Completions request, as strict as the real endpoints are about messages ----------


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ChatFunction(_Strict):
    name: str
    arguments: str


class ChatToolCall(_Strict):
    id: str
    type: Literal["function"] = "function"
    function: ChatFunction


class ChatMessage(_Strict):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[ChatToolCall] | None = None
    tool_call_id: str | None = None

    @property
    def text(self) -> str:
        if isinstance(self.content, list):
            return "".join(p.get("text") or "" for p in self.content if p.get("type") == "text")
        return self.content or ""


class ChatFunctionDef(_Strict):
    name: str
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class ChatTool(_Strict):
    type: Literal["function"]
    function: ChatFunctionDef


class ChatRequest(BaseModel):
    """Top-level keys beyond these are kept: real endpoints take their own (``top_k``, ...)."""

    model_config = ConfigDict(extra="allow")

    model: str
    messages: list[ChatMessage] = Field(min_length=1)
    tools: list[ChatTool] | None = None
    tool_choice: Any = None
    parallel_tool_calls: bool | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stream: Literal[False] | None = None


def params_from_chat(req: ChatRequest) -> ResponseCreateParams:
    """The Chat request as the Responses request a policy reads."""
    items: list[Any] = []
    for m in req.messages:
        if m.role == "tool":
            if not m.tool_call_id:
                raise ValueError("messages with role 'tool' must have a 'tool_call_id'")
            items.append(FunctionCallOutput(type="function_call_output", call_id=m.tool_call_id, output=m.text))
            continue
        if m.text or not m.tool_calls:
            items.append(Message(role=m.role, content=m.text))
        for call in m.tool_calls or []:
            items.append(FunctionCall(name=call.function.name, arguments=call.function.arguments, call_id=call.id))
    tools = [
        FunctionTool(
            name=t.function.name,
            description=t.function.description,
            parameters=t.function.parameters,
            strict=t.function.strict,
        )
        for t in req.tools or []
    ]
    limit = req.max_completion_tokens or req.max_tokens
    return ResponseCreateParams(input=items, tools=tools, model=req.model, max_output_tokens=limit)


def _truncate(response: NeMoGymResponse, limit: int | None) -> NeMoGymResponse:
    """Cut the answer's text to ``limit`` words, as a token limit would (marking it incomplete)."""
    if not limit:
        return response
    words = response.output_text.split()
    if len(words) <= limit:
        return response
    output = [i for i in response.output if not isinstance(i, Message)]
    output.append(assistant_message(" ".join(words[:limit])))
    return response.model_copy(
        update={"output": output, "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}
    )


def chat_from_response(response: NeMoGymResponse, model: str, reasoning: str | None = None) -> dict:
    """A Responses answer in Chat Completions form (``reasoning_content`` as vLLM/SGLang/DeepSeek give it)."""
    calls = response.function_calls
    thinking = " ".join(s.text for i in response.output if isinstance(i, Reasoning) for s in i.summary)
    message: dict[str, Any] = {"role": "assistant", "content": response.output_text or None}
    if thinking or reasoning:
        message["reasoning_content"] = thinking or reasoning
    if calls:
        message["tool_calls"] = [
            {"id": c.call_id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls
        ]
    if response.incomplete_details:
        finish = "length"
    else:
        finish = "tool_calls" if calls else "stop"
    usage = response.usage
    return {
        "id": f"chatcmpl-{new_id('x')[2:]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": usage.input_tokens,
            "completion_tokens": usage.output_tokens,
            "total_tokens": usage.total_tokens,
        },
    }


def openai_error(
    status: int,
    message: str,
    type_: str | None = None,
    code: str | None = None,
    param: str | None = None,
    headers: dict | None = None,
) -> JSONResponse:
    """An error in OpenAI's shape."""
    body = {
        "error": {
            "message": message,
            "type": type_ or _STATUS_TYPES.get(status, "server_error"),
            "param": param,
            "code": code,
        }
    }
    return JSONResponse(body, status_code=status, headers=headers)


class OpenAIUpstream(BaseServer):
    """An OpenAI-compatible endpoint over ``policy(request)`` (a ``ResponseCreateParams``), for tests."""

    name: str = "openai_upstream"
    policy: Callable[[ResponseCreateParams], Any]
    model_name: str = "fake-model"
    api_key: str | None = Field(None, description="When set, requests must carry 'Authorization: Bearer <key>'.")
    echo_key_in_errors: bool = Field(False, description="A careless endpoint: its 401 repeats the key it got.")
    fail_times: int = Field(0, description="Fail this many of the next requests (after the key check).")
    fail_status: int = 500
    retry_after: float | None = Field(None, description="Retry-After header (seconds) on injected failures.")
    delay_s: float = Field(0.0, description="Wait this long before answering (ends early if the client leaves).")
    delay_times: int | None = Field(None, description="Delay only this many of the next requests (None: all).")
    reasoning: str | None = Field(None, description="Chat answers carry this as reasoning_content.")

    _requests: list[dict] = PrivateAttr(default_factory=list)
    _failures_left: int = PrivateAttr(0)
    _delays_left: int | None = PrivateAttr(None)

    def model_post_init(self, __context: Any) -> None:
        super().model_post_init(__context)
        self.inject(
            fail_times=self.fail_times,
            fail_status=self.fail_status,
            retry_after=self.retry_after,
            delay_s=self.delay_s,
            delay_times=self.delay_times,
        )

    def inject(
        self,
        *,
        fail_times: int = 0,
        fail_status: int = 500,
        retry_after: float | None = None,
        delay_s: float = 0.0,
        delay_times: int | None = None,
    ) -> None:
        """Set the faults for the next requests (replacing any left over)."""
        self.fail_times, self.fail_status, self.retry_after = fail_times, fail_status, retry_after
        self.delay_s, self.delay_times = delay_s, delay_times
        self._failures_left, self._delays_left = fail_times, delay_times

    @property
    def requests(self) -> list[dict]:
        """Every request received: ``{"path", "body", "authorized"}`` (the key itself is not kept)."""
        return self._requests

    def setup_webserver(self) -> FastAPI:
        # A plain app, not gymlab's: this stands for a foreign endpoint, errors in OpenAI's shape.
        app = FastAPI(title="openai-compatible test upstream")
        app.post("/v1/responses")(self.responses)
        app.post("/v1/chat/completions")(self.chat_completions)
        app.get("/v1/models")(self.models)
        return app

    async def models(self) -> dict:
        return {
            "object": "list",
            "data": [{"id": self.model_name, "object": "model", "created": 0, "owned_by": "gymlab"}],
        }

    async def _gate(self, request: Request, path: str) -> tuple[Any, JSONResponse | None]:
        """Record the request, then apply the key check, injected failures and delay."""
        try:
            body = await request.json()
        except ValueError:
            return None, openai_error(400, "We could not parse the JSON body of your request.")
        auth = request.headers.get("authorization")
        authorized = self.api_key is None or auth == f"Bearer {self.api_key}"
        self._requests.append({"path": path, "body": body, "authorized": authorized})
        if not authorized:
            if not auth:
                return body, openai_error(
                    401,
                    "You didn't provide an API key. You need to provide your API key "
                    "in an Authorization header using Bearer auth.",
                )
            given = auth.removeprefix("Bearer ")
            shown = given if self.echo_key_in_errors else f"{given[:3]}{'*' * max(0, len(given) - 7)}{given[-4:]}"
            return body, openai_error(
                401,
                f"Incorrect API key provided: {shown}. You can find your API key "
                "at https://platform.openai.com/account/api-keys.",
                code="invalid_api_key",
            )
        if self._failures_left > 0:
            self._failures_left -= 1
            headers = {"Retry-After": f"{self.retry_after:g}"} if self.retry_after is not None else None
            status = self.fail_status
            return body, openai_error(
                status, _STATUS_MESSAGES.get(status, f"Injected failure {status}."), headers=headers
            )
        if self.delay_s and (self._delays_left is None or self._delays_left > 0):
            if self._delays_left is not None:
                self._delays_left -= 1
            deadline = time.monotonic() + self.delay_s
            while time.monotonic() < deadline:
                if await request.is_disconnected():
                    return body, openai_error(499, "client went away")
                await asyncio.sleep(0.02)
        return body, None

    async def _answer(self, params: ResponseCreateParams) -> NeMoGymResponse:
        from gymlab.models.policy import as_response

        answer = self.policy(params)
        if asyncio.iscoroutine(answer):
            answer = await answer
        return _truncate(as_response(answer, params, self.model_name), params.max_output_tokens)

    async def responses(self, request: Request):
        body, error = await self._gate(request, "/v1/responses")
        if error is not None:
            return error
        try:
            params = ResponseCreateParams.model_validate(body)
        except ValidationError as exc:
            e = exc.errors()[0]
            if e["type"] == "extra_forbidden":
                return openai_error(
                    400,
                    f"Unknown parameter: '{'.'.join(map(str, e['loc']))}'.",
                    code="unknown_parameter",
                    param=str(e["loc"][-1]),
                )
            return openai_error(400, f"Invalid request: {'.'.join(map(str, e['loc']))}: {e['msg']}")
        response = await self._answer(params)
        out = response.model_dump(mode="json", exclude_none=True)
        out.setdefault("incomplete_details", None)
        out["usage"]["input_tokens_details"].setdefault("cache_write_tokens", 0)  # as OpenAI's usage has it
        out.update(
            model=params.model or self.model_name,
            error=None,
            instructions=params.instructions,
            metadata=params.metadata or {},
            temperature=params.temperature,
            top_p=params.top_p,
        )
        return out

    async def chat_completions(self, request: Request):
        body, error = await self._gate(request, "/v1/chat/completions")
        if error is not None:
            return error
        try:
            req = ChatRequest.model_validate(body)
            params = params_from_chat(req)
        except (ValidationError, ValueError) as exc:
            if isinstance(exc, ValidationError):
                e = exc.errors()[0]
                msg = f"Invalid value at '{'.'.join(map(str, e['loc']))}': {e['msg']}"
            else:
                msg = str(exc)
            return openai_error(400, msg)
        response = await self._answer(params)
        return chat_from_response(response, req.model, self.reasoning)
