"""HTTP between servers: a ``Client`` owned by a Lab or a server, in-process to its registry's servers, else
over aiohttp; cookies kept per rollout, a broken exchange a typed ``TransportError`` (docs/transport.md)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Coroutine
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import aiohttp
import orjson

from gymlab._http.cookies import answer_cookie_pairs, cookie_header, request_cookies
from gymlab._http.inproc import Registry, call
from gymlab._http.retry import backoff_delay, retrying
from gymlab._http.wire import AiohttpTransport, Answer, AnswerTooLarge
from gymlab.errors import (
    ServerError,
    TransportAnswerTooLarge,
    TransportError,
    TransportPeerDrop,
    TransportTimeout,
    TransportUnreachable,
)
from gymlab.jsonl import loads
from gymlab.protocol.failure_kinds import Failure
from gymlab.protocol.responses import Message, NeMoGymResponse, OtherItem, Reasoning

#: Seconds to open a connection before giving up (every hop).
CONNECT_TIMEOUT_S = 10.0
#: Sends of a request that provably never reached its server (its connection refused) before it fails
#: as unreachable. A request that went out is never resent.
SEND_ATTEMPTS = 3
#: What a socket hop raises when it got no whole answer (ValueErrors, a bad URL or header, are the caller's).
_BROKEN = (TimeoutError, OSError, aiohttp.ClientError)
_JSON_HEADERS = {"Content-Type": "application/json"}  # copied by ``request``
_UNBOUNDED = contextlib.nullcontext()  # a hop without a timeout skips asyncio.timeout's timer work


@dataclass
class Cookies:
    """One rollout's cookies, per server URL (read and written by ``gymlab._http.cookies``)."""

    by_url: dict[str, dict[str, str]] = field(default_factory=dict)

    @classmethod
    def from_header(cls, url: str, header: str | None) -> Cookies:
        """The cookies of a ``Cookie`` header (as ``header`` wrote it) kept for ``url``."""
        jar = cls()
        if pairs := request_cookies(header):
            jar.by_url[url] = pairs
        return jar

    def header(self, url: str) -> str | None:
        return cookie_header(self.by_url.get(url) or {})

    def update_from_values(self, url: str, values: list[bytes] | list[str]) -> None:
        """Keep the cookies of an answer's ``Set-Cookie`` header values (bounded: ``cookies.answer_cookie_pairs``)."""
        if pairs := answer_cookie_pairs(values):
            self.by_url.setdefault(url, {}).update(pairs)


@dataclass
class Reply:
    """A server's answer: the status, the body's bytes (decoded to ``text`` on demand), the raw headers."""

    status: int
    body: bytes
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (any case), or None."""
        key = name.lower().encode("latin-1")
        return next((v.decode("latin-1") for k, v in self.headers if k.lower() == key), None)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        """The body parsed (``gymlab.jsonl.loads``: an int past 64 bits kept whole); a lone surrogate in
        a string becomes U+FFFD, so the answer can be sent on as JSON."""
        try:
            value = loads(self.body)
        except RecursionError:
            raise ValueError("nested too deeply") from None
        return _whole_characters(value) if b"\\u" in self.body and _SURROGATE_ESCAPE.search(self.body) else value

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


#: A UTF-16 surrogate's escape (``\\ud800``-``\\udfff``): only a body with one can hold a lone surrogate.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89abcdefABCDEF]")


def _whole_characters(value: Any) -> Any:
    """``value`` with each lone surrogate of its strings and keys replaced by U+FFFD."""
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, list):
        return [_whole_characters(v) for v in value]
    if isinstance(value, dict):
        return {_whole_characters(k): _whole_characters(v) for k, v in value.items()}
    return value


def transport_error(
    server: str, url: str, path: str, exc: BaseException, timeout: float | None, method: str = "POST"
) -> TransportError:
    """A broken exchange as its ``TransportError``, by type: nothing sent is unreachable, a timeout is a
    timeout, anything else broke after the request went out."""
    kind: type[TransportError]
    if isinstance(exc, (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)):
        kind, cause = TransportUnreachable, f"cannot connect to {url}: {exc}"
        hint = "is the server running, and is the URL right?"
    elif isinstance(exc, AnswerTooLarge):
        kind, cause = TransportAnswerTooLarge, f"{url} answered too much: {exc}"
        hint = "the server's answer is endless or runaway; see its log"
    elif isinstance(exc, TimeoutError):
        within = f" within {timeout:g} s" if timeout is not None else ""
        kind, cause = TransportTimeout, f"no answer from {url}{within}"
        hint = "the server is slow or stuck; raise the timeout in the server's config or the run's options"
    else:
        kind, cause = TransportPeerDrop, f"{url} dropped the connection after the request went out: {exc}"
        hint = "the server process may have died or restarted; the request was not sent again"
    return kind(server, f"{method} {path}", cause, hint)


def _resend_delay(exc: BaseException, attempt: int) -> float | None:
    """Seconds to wait before sending again after ``exc`` ended try ``attempt``, or None: not again
    (only a refused connection provably sent nothing)."""
    refused = isinstance(exc, aiohttp.ClientConnectorError) and isinstance(exc.os_error, ConnectionRefusedError)
    return backoff_delay(0.05, attempt, cap_s=0.5) if refused and attempt < SEND_ATTEMPTS else None


class Client:
    """Every hop's HTTP: the servers of its ``registry`` in-process (a Lab's own), the rest through its
    ``transport`` (aiohttp). Made by whoever owns it (a Lab, a server's lifespan, a run) and closed by it."""

    def __init__(self, registry: Registry | None = None):
        self.registry = registry if registry is not None else Registry()
        self.transport = AiohttpTransport()

    async def request(
        self,
        method: str,
        url: str,
        path: str,
        data: bytes | None = None,
        *,
        headers: dict[str, str] | None = None,
        cookies: Cookies | None = None,
        server: str = "",
        timeout: float | None = None,
        connect_timeout: float = CONNECT_TIMEOUT_S,
    ) -> Reply:
        """One exchange with ``url + path``, whatever the status, its ``Set-Cookie`` kept in ``cookies``; ``timeout``
        bounds it all, resends included; a broken exchange raises a ``TransportError``."""
        sent = dict(headers or {})
        if cookies is not None and (cookie := cookies.header(url)):
            sent["Cookie"] = cookie
        if any("\r" in v or "\n" in v for v in sent.values()):  # on every path, not only aiohttp's
            raise ValueError(f"{server or url}: {method} {path}: a header value holds a line break")
        local = self.registry.lookup(url)
        answer: Answer
        try:
            async with asyncio.timeout(timeout) if timeout is not None else _UNBOUNDED:
                if local is not None:  # a server of this registry: into its ASGI app, same answers and failures
                    answer = await call(local, method, path, data or b"", sent)
                else:
                    send = self.transport.send
                    answer = await retrying(
                        lambda: send(method, url + path, data, sent, connect_timeout=connect_timeout), _resend_delay
                    )
        except _BROKEN as exc:
            if isinstance(exc, ValueError):
                raise
            raise transport_error(server or url, url, path, exc, timeout, method) from exc
        status, heads, body = answer
        if cookies is not None:
            cookies.update_from_values(url, [v for k, v in heads if k.lower() == b"set-cookie"])
        return Reply(status, body, heads)

    def post(
        self,
        url: str,
        path: str,
        payload: Any,
        cookies: Cookies | None = None,
        server: str = "",
        timeout: float | None = None,
        *,
        headers: dict[str, str] | None = None,
    ) -> Coroutine[Any, Any, Reply]:
        """POST ``payload`` as JSON and return the answer, whatever the status (``request``, awaited by the caller)."""
        sent = {"Content-Type": "application/json", **headers} if headers else _JSON_HEADERS
        return self.request(
            "POST", url, path, _dumps(payload), headers=sent, cookies=cookies, server=server, timeout=timeout
        )

    async def post_ok(
        self,
        url: str,
        path: str,
        payload: Any,
        cookies: Cookies | None = None,
        server: str = "",
        timeout: float | None = None,
        *,
        headers: dict[str, str] | None = None,
    ) -> Any:
        """POST JSON and return the parsed answer; an error status raises ``ServerError`` carrying the
        typed ``failure`` the error body gave, if any."""
        reply = await self.post(url, path, payload, cookies, server, timeout, headers=headers)
        return parsed(reply, path, server or url)

    async def ask_model(
        self, url: str, body: dict[str, Any], *, server: str = "model server", timeout: float | None = None
    ) -> NeMoGymResponse:
        """``POST /v1/responses``: the model's response. An answer that is not a Responses object raises
        ``ServerError`` with a provider failure: a non-answer is never graded as empty."""
        return _model_response(await self.post(url, "/v1/responses", body, server=server, timeout=timeout), server)

    async def close(self) -> None:
        """Close the running loop's connections."""
        await self.transport.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, trace: TracebackType | None
    ) -> None:
        await self.close()


def parsed(reply: Reply, path: str, server: str) -> Any:
    """The parsed body of a 2xx ``reply``; an error status or a body that is not JSON raises ``ServerError``."""
    if not reply.ok:  # a gymlab error body names the server, may share its traceback and its typed failure
        fields = _body_fields(reply.text)
        name, trace, failure = fields.get("server"), fields.get("trace"), fields.get("failure")
        try:
            failure = Failure.model_validate(failure) if isinstance(failure, dict) else None
        except ValueError:
            failure = None
        raise ServerError(
            f"{server} '{name}'" if isinstance(name, str) and name and name != server else server,
            f"POST {path}",
            reply.status,
            error_message(reply.text),
            failure=failure,
            trace=trace if isinstance(trace, str) else None,
        )
    try:
        return reply.json()
    except ValueError as exc:  # orjson.JSONDecodeError is a ValueError
        raise ServerError(server, f"POST {path}", reply.status, f"answer is not JSON: {reply.text[:200]!r}") from exc


def _model_response(reply: Reply, server: str) -> NeMoGymResponse:
    """A model server's answer as a Responses object, or ``ServerError`` with a provider failure."""
    if reply.ok:  # the common case, validated straight from the bytes in one pass
        with contextlib.suppress(ValueError, TypeError):
            response = NeMoGymResponse.model_validate_json(reply.body)
            if "output" in response.model_fields_set and not getattr(response, "error", None):
                if _non_answer(response) is None:
                    return response
    answer = parsed(reply, "/v1/responses", server)
    problem = None
    if not (isinstance(answer, dict) and isinstance(answer.get("output"), list)) or answer.get("error"):
        problem = "a body that is not a Responses object"
    else:
        try:
            response = NeMoGymResponse.model_validate(answer)
        except (ValueError, TypeError) as exc:  # TypeError: a malformed discriminator (``{"type": {}}``)
            problem = f"a Responses object that does not validate ({str(exc).splitlines()[0]})"
        else:
            if (problem := _non_answer(response)) is None:
                return response
    cause = f"the model server answered 200 with {problem}: {json.dumps(answer)[:200]}"
    failure = Failure(kind="provider_unavailable", server=server, status=200, message=cause)
    raise ServerError(
        server,
        "POST /v1/responses",
        200,
        cause,
        "point the model server at an OpenAI-compatible Responses endpoint",
        failure,
    )


def _non_answer(response: NeMoGymResponse) -> str | None:
    """Why a model server's 200 holds no answer a model gave, or None (then it is graded); the rules are
    in docs/transport.md."""
    output = response.output
    for n, item in enumerate(output):
        if "type" not in item.model_fields_set:
            return f"output[{n}] has no type"
        if isinstance(item, Message):
            if "content" not in item.model_fields_set or item.content == []:
                return f"output[{n}] is a message without content"
            if not isinstance(item.content, str) and any(
                p.type == "output_text" and not isinstance(p.text, str) for p in item.content
            ):
                return f"output[{n}] has an output_text part whose text is not a string"
    if any(isinstance(i, OtherItem) for i in output) and all(isinstance(i, (OtherItem, Reasoning)) for i in output):
        return f"an output of item types it does not know ({', '.join(sorted({i.type for i in output}))})"
    reason = (response.incomplete_details or {}).get("reason")
    if not output and response.status == "incomplete" and reason != "max_output_tokens":
        return f"status incomplete ({reason or 'no reason given'}) and no output"
    return None


def _dumps(payload: Any) -> bytes:
    """A request body: orjson, several times faster than the standard library on episode-sized
    bodies; a payload orjson refuses (a non-string key, an int past 64 bits) falls back to it."""
    try:
        return orjson.dumps(payload)
    except TypeError:
        return json.dumps(payload).encode()


def _body_fields(text: str) -> dict[str, Any]:
    """The fields of a JSON error body ({} for one that is not a JSON object)."""
    try:
        body = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    return body if isinstance(body, dict) else {}


def error_message(text: str) -> str:
    """The human part of an error body (gymlab's ``detail``/``message``, or the raw text)."""
    body = _body_fields(text)
    for key in ("detail", "message", "error"):
        if isinstance(value := body.get(key), str):
            return value
    return json.dumps(body["detail"])[:500] if "detail" in body else text[:500]


def fetch(method: str, url: str, path: str, *, timeout: float) -> Reply:
    """One request from sync code (waiting for a process to serve, reading a schema), on gymlab's loop
    with a client made for it and closed after."""
    from gymlab._sync import run_sync

    async def once() -> Reply:
        async with Client() as client:
            return await client.request(method, url, path, server=url, timeout=timeout)

    return run_sync(once())
