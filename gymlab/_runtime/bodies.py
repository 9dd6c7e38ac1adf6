"""``BodyGuardMiddleware``: a request body is bounded (413 as it streams in) and holds only JSON an answer
can carry back (``NaN``, ``Infinity`` or a lone surrogate: 422 naming the field)."""

from __future__ import annotations

import json
import math
import re
from collections.abc import MutableMapping
from typing import Any

import orjson
from starlette.responses import JSONResponse

from gymlab.errors import error_body
from gymlab.jsonl import loads as parse_json
from gymlab.jsonl import long_int

#: Where the guard (outside every session middleware) leaves the whole request body for inner ones.
BODY_KEY = "gymlab.body"
#: Where the guard (or a middleware or route that had to parse the JSON body) leaves ``(body, parsed)``.
PARSED_KEY = "gymlab.json"


def parsed_body(scope: MutableMapping[str, Any], body: bytes) -> Any:
    """``body`` as ``parse_json`` reads it: the parse an outer layer left in ``scope``, else parsed now and
    left there for the layers inside (ValueError or RecursionError: no JSON)."""
    held = scope.get(PARSED_KEY)
    if held is not None and held[0] is body:
        return held[1]
    data = parse_json(body)
    scope[PARSED_KEY] = (body, data)
    return data


#: What may make a JSON body unsendable: a non-finite number, or a surrogate (escaped, or as UTF-8 bytes).
_SUSPECT = re.compile(rb"NaN|Infinity|\\u[dD][89a-fA-F]|\xed[\xa0-\xbf]")
_PAIR_HINT = "send the character itself, or both halves of its UTF-16 pair (\\ud83d\\ude00), or U+FFFD"


def error_response(server: str, scope, status: int, message: str, headers=None, **fields) -> JSONResponse:
    """A JSON error answer naming ``server``, the request's route and the cause (``error_body``)."""
    route = f"{scope['method']} {scope['path']}"
    return JSONResponse(status_code=status, content=error_body(server, route, message, **fields), headers=headers)


def replaying(body: bytes, receive, after: dict | None = None):
    """A ``receive`` that gives ``body`` whole once, then ``after`` (if any), then the real messages."""
    pending = [{"type": "http.request", "body": body, "more_body": False}, *([after] if after else [])]

    async def replay():
        return pending.pop(0) if pending else await receive()

    return replay


async def request_body(scope, receive) -> tuple[bytes, object]:
    """The whole request body (the guard's copy, else read here: an app without the guard, a cell's bridge)
    and the ``receive`` to use next."""
    if BODY_KEY in scope:
        return scope[BODY_KEY], receive
    read, after = await read_body(receive)
    body = read or b""  # never None: no limit
    return body, replaying(body, receive, after)  # a disconnect read early is handed on after the body


async def read_body(receive, limit: float = math.inf) -> tuple[bytes | None, dict | None]:
    """The request body (None once past ``limit`` bytes) and the message that ended it early (a disconnect)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return b"".join(chunks), message
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            return None, None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks), None


def close_follows(body: bytes | None) -> bool:
    """Whether a ``/verify`` body says a close follows (``close_follows: true``): the episode is not over."""
    if not body or b"close_follows" not in body:
        return False
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and data.get("close_follows") is True


class BodyGuardMiddleware:
    """Outermost ASGI middleware: 413 past ``max_bytes``, 422 for non-finite JSON numbers."""

    def __init__(self, app, server_name: str, max_bytes: int, route_limits: dict[str, int] | None = None):
        self.app, self.server_name, self.max_bytes = app, server_name, int(max_bytes)
        self.route_limits = {path: int(limit) for path, limit in (route_limits or {}).items()}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope["headers"])
        limit = self.route_limits.get(scope["path"], self.max_bytes)
        declared = headers.get(b"content-length", b"").strip()
        if declared.isdigit() and int(declared) > limit:
            return await self._too_large(scope, int(declared), limit)(scope, receive, send)
        body, left = await read_body(receive, limit)
        if body is None:
            return await self._too_large(scope, None, limit)(scope, receive, send)
        if left is not None:
            return  # the client left before its body arrived: nobody to answer
        if body and is_json(headers.get(b"content-type"), missing=True):
            try:  # orjson refuses NaN, Infinity and lone surrogates: what it reads is sendable
                data = orjson.loads(body)
            except ValueError:
                found = _unsendable(body) if _SUSPECT.search(body) else None
                if found is not None:
                    return await self._unsendable(scope, *found)(scope, receive, send)
            else:
                if not long_int(body):  # read as ``parse_json`` reads it: inner layers and the route use it
                    scope[PARSED_KEY] = (body, data)
        scope[BODY_KEY] = body  # inner middlewares read it here instead of reading it again
        await self.app(scope, replaying(body, receive), send)

    def _too_large(self, scope, declared: int | None, limit: int) -> JSONResponse:
        size = f"{declared} bytes" if declared is not None else f"more than {limit} bytes"
        message = f"the request body ({size}) is over this server's limit of {limit} bytes"
        if scope["path"] in self.route_limits:  # /aggregate_metrics: a whole run's verify answers
            hint = (
                "send the verify answers without their steps, response and responses_create_params, compute "
                "the metrics on the client (gymlab.resources.simple.aggregate_metrics), or raise the "
                "server's max_metrics_body_bytes config"
            )
        else:
            hint = "send a smaller body, or raise the server's max_body_bytes config"
        # No "Connection: close": the kernel would reset the connection, dropping this answer (docs/runtime.md).
        return error_response(
            self.server_name, scope, 413, message, error="RequestBodyTooLarge", hint=hint, limit=limit
        )

    def _unsendable(self, scope, field: str, why: str, hint: str) -> JSONResponse:
        message = f"{field}: {why}"
        return error_response(
            self.server_name, scope, 422, message, error="RequestValidationError", hint=hint, field=field
        )


def is_json(content_type: bytes | None, missing: bool) -> bool:
    """Whether a ``Content-Type`` names JSON (``application/json``, ``application/*+json``); ``missing`` if none."""
    if content_type is None:
        return missing
    kind = content_type.split(b";")[0].strip().lower()
    return kind == b"application/json" or (kind.startswith(b"application/") and kind.endswith(b"+json"))


def _unsendable(body: bytes) -> tuple[str, str, str] | None:
    """The dotted path of the first NaN, Infinity or lone surrogate in ``body``, why and what instead; or None."""
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None  # not JSON: the route's own parsing answers it
    stack = [(data, "body")]
    while stack:
        value, path = stack.pop()
        if isinstance(value, float) and not math.isfinite(value):
            return path, "NaN and Infinity are not JSON numbers", "send a finite number or null"
        if isinstance(value, str) and not _whole(value):
            return path, "holds a lone surrogate (half of a UTF-16 pair, not a character)", _PAIR_HINT
        if isinstance(value, dict):
            stack.extend((k, f"{path} (a key)") for k in value if not _whole(k))
            stack.extend((v, f"{path}.{k}") for k, v in reversed(list(value.items())))
        elif isinstance(value, list):
            stack.extend((v, f"{path}.{i}") for i, v in reversed(list(enumerate(value))))
    return None


def _whole(text: str) -> bool:
    """Whether ``text`` is whole characters (no lone surrogate: the standard library pairs the rest)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
