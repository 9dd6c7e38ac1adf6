"""``POST /v1/responses`` of a model server; ``stream: true`` tells the whole response as Responses events."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from gymlab.errors import GymlabError, error_body
from gymlab.jsonl import dumps
from gymlab.protocol import NeMoGymResponse, ResponseCreateParams
from gymlab.protocol.failure_kinds import Failure

log = logging.getLogger("gymlab.models")

_TERMINAL = {"completed": "response.completed", "incomplete": "response.incomplete", "failed": "response.failed"}


class StreamableParams(ResponseCreateParams):
    """A ``/v1/responses`` body: the Responses request, where ``stream: true`` asks for events."""

    stream: bool | None = None


class Refused(GymlabError):
    """What a model server answers an error with: status, cause, what to do, a failure kind when the request is
    not at fault, and more body fields."""

    def __init__(self, status: int, cause: str, hint: str = "", kind: str | None = None, **fields: Any):
        self.status, self.cause, self.hint, self.kind, self.fields = status, cause, hint, kind, fields
        super().__init__(cause)


def serve_responses(
    app: FastAPI, respond: Callable[[ResponseCreateParams], Awaitable[NeMoGymResponse]], server: str
) -> None:
    """``POST /v1/responses`` on ``app``, answered by ``respond`` (``stream: true``: as events); ``Refused``
    answers with its error body."""

    async def responses(body: StreamableParams) -> NeMoGymResponse:
        if body.stream:
            return streamed(await respond(unstreamed(body)))
        return await respond(body)

    async def refused(request: Request, exc: Refused) -> JSONResponse:
        failure = Failure(kind=exc.kind, server=server, status=exc.status, message=exc.cause) if exc.kind else None
        route = f"{request.method} {request.url.path}"
        body = error_body(server, route, exc.cause, hint=exc.hint, failure=failure, **exc.fields)
        (log.warning if exc.status < 500 else log.error)("%s", body["detail"])
        return JSONResponse(body, status_code=exc.status)

    app.post("/v1/responses", response_model_exclude_none=True)(responses)
    app.add_exception_handler(Refused, refused)


def unstreamed(body: StreamableParams) -> ResponseCreateParams:
    """The request without ``stream`` (what is asked of a policy, an upstream or the agent's loop)."""
    return ResponseCreateParams.model_validate(body.model_dump(mode="json", exclude_unset=True, exclude={"stream"}))


def streamed(response: NeMoGymResponse) -> Response:
    """``response`` as a ``text/event-stream`` of Responses events (whole: it is generated before it is told)."""
    events = b"".join(f"event: {e['type']}\ndata: ".encode() + dumps(e) + b"\n\n" for e in response_events(response))
    return Response(events, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


def response_events(response: NeMoGymResponse) -> Iterator[dict[str, Any]]:
    """The Responses stream events that tell ``response``, numbered from 0."""
    whole = response.model_dump(mode="json", exclude_none=True)
    started = {**whole, "status": "in_progress", "output": []}
    started.pop("usage", None)
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": started},
        {"type": "response.in_progress", "response": started},
    ]
    for index, item in enumerate(whole.get("output", [])):
        events.extend(_item_events(index, item))
    events.append({"type": _TERMINAL.get(whole.get("status") or "completed", "response.completed"), "response": whole})
    for number, event in enumerate(events):
        event["sequence_number"] = number
        yield event


def _item_events(index: int, item: dict[str, Any]) -> list[dict[str, Any]]:
    kind = item.get("type")
    item_id = item.get("id") or item.get("call_id") or f"item_{index}"
    where = {"item_id": item_id, "output_index": index}
    if kind == "message":
        events = [_added(index, {**item, "status": "in_progress", "content": []})]
        for part_index, part in enumerate(item.get("content") or []):
            at = {**where, "content_index": part_index}
            if part.get("type") == "output_text":
                text = part.get("text", "")
                events += [
                    {"type": "response.content_part.added", **at, "part": {**part, "text": ""}},
                    {"type": "response.output_text.delta", **at, "delta": text, "logprobs": []},
                    {"type": "response.output_text.done", **at, "text": text, "logprobs": []},
                ]
            else:
                events.append({"type": "response.content_part.added", **at, "part": part})
            events.append({"type": "response.content_part.done", **at, "part": part})
    elif kind == "function_call":
        arguments = item.get("arguments", "")
        events = [
            _added(index, {**item, "status": "in_progress", "arguments": ""}),
            {"type": "response.function_call_arguments.delta", **where, "delta": arguments},
            {"type": "response.function_call_arguments.done", **where, "arguments": arguments},
        ]
    else:
        events = [_added(index, item)]
    events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    return events


def _added(index: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "response.output_item.added", "output_index": index, "item": item}
