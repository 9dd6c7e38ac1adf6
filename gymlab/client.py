"""HTTP between servers: pooled keep-alive connections per event loop, cookies kept per rollout.

A plain ``http://`` hop goes through ``gymlab.http1`` (httptools, about a third of aiohttp's client
CPU per POST); ``https://`` and machines without httptools go through one shared aiohttp session
per loop (DESIGN.md: 6,600 req/s at 16 concurrent vs 540 for httpx). A server of the same Lab is
called in-process (``gymlab.inproc``). No pool keeps cookies: each rollout carries its own
``Cookies``, so concurrent rollouts never share a session while all of them share the connections.
``GYMLAB_HTTP_CLIENT=aiohttp`` sends every hop through aiohttp (to compare the two on one machine).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import weakref
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from typing import Any

import aiohttp
import orjson

import gymlab.http1 as http1
import gymlab.inproc as inproc
from gymlab.errors import ServerError, TransportError, TransportPeerDrop, TransportTimeout, TransportUnreachable
from gymlab.protocol.failure_kinds import Failure
from gymlab.protocol.responses import NeMoGymResponse
from gymlab.retry import backoff_delay

#: Seconds to open a connection before giving up (every hop).
CONNECT_TIMEOUT_S = 10.0

_sessions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aiohttp.ClientSession] = weakref.WeakKeyDictionary()


def http_session() -> aiohttp.ClientSession:
    """The aiohttp session of the running event loop (created on first use)."""
    loop = asyncio.get_running_loop()
    session = _sessions.get(loop)
    if session is None or session.closed:
        session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=None),
            cookie_jar=aiohttp.DummyCookieJar(),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
        )
        _sessions[loop] = session
    return session


async def close_http_session() -> None:
    """Close the running loop's connections (servers call this on shutdown)."""
    http1.close_pool()
    loop = asyncio.get_running_loop()
    session = _sessions.pop(loop, None)
    if session is not None and not session.closed:
        await session.close()


@contextlib.asynccontextmanager
async def http_scope():
    """Close the running loop's session on exit if this scope created it.

    Entry points that may run on a caller's short-lived loop (``asyncio.run(acollect(...))``) wrap
    their work in this, so no connection pool outlives its loop.
    """
    loop = asyncio.get_running_loop()
    existed = loop in _sessions and not _sessions[loop].closed
    try:
        yield
    finally:
        if not existed:
            await close_http_session()


@dataclass
class Cookies:
    """One rollout's cookies, per server URL."""

    by_url: dict[str, dict[str, str]] = field(default_factory=dict)

    def header(self, url: str) -> str | None:
        jar = self.by_url.get(url)
        return "; ".join(f"{k}={v}" for k, v in jar.items()) if jar else None

    def update(self, url: str, response: aiohttp.ClientResponse) -> None:
        if response.cookies:
            self._keep(url, response.cookies)

    def update_from_headers(self, url: str, headers: list[tuple[bytes, bytes]]) -> None:
        """Keep the cookies of an in-process answer's ``Set-Cookie`` headers."""
        self.update_from_values(url, [value for key, value in headers if key.lower() == b"set-cookie"])

    def update_from_values(self, url: str, values: list[bytes]) -> None:
        """Keep the cookies of ``Set-Cookie`` header values."""
        for raw in values:
            value = raw.decode("latin-1")
            pair = _plain_set_cookie(value)
            if pair is not None:
                self.by_url.setdefault(url, {})[pair[0]] = pair[1]
            else:
                self._keep(url, SimpleCookie(value))

    def _keep(self, url: str, cookies: SimpleCookie) -> None:
        jar = self.by_url.setdefault(url, {})
        for key, morsel in cookies.items():
            jar[key] = morsel.value


#: A ``name=value`` pair that needs no unquoting: what every session cookie of a server looks like.
_PLAIN_PAIR = re.compile(r"\s*([A-Za-z0-9_.\-]+)=([A-Za-z0-9_.\-=+/:]*)\s*")
_COOKIE_ATTRIBUTES = frozenset(
    {"path", "domain", "expires", "max-age", "secure", "httponly", "samesite", "comment", "version", "partitioned"}
)


def _plain_set_cookie(value: str) -> tuple[str, str] | None:
    """(name, value) of a ``Set-Cookie`` value made of one plain pair and known attributes, as
    ``SimpleCookie`` reads it, without its general parser (17 us a seed); None for anything else,
    which the general parser then reads."""
    first, *attributes = value.split(";")
    pair = _PLAIN_PAIR.fullmatch(first)
    if pair is None or pair[1].lower() in _COOKIE_ATTRIBUTES:
        return None
    for attribute in attributes:
        if attribute.split("=", 1)[0].strip().lower() not in _COOKIE_ATTRIBUTES:
            return None
    return pair[1], pair[2]


@dataclass
class Reply:
    """A server's answer: the status and the body's bytes (decoded to ``text`` on demand)."""

    status: int
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return orjson.loads(self.body)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


def transport_error(server: str, url: str, path: str, exc: BaseException, timeout: float | None) -> TransportError:
    """A broken exchange as the ``TransportError`` it is (unreachable, peer drop, timeout), decided by type:
    whatever provably sent nothing is unreachable; a timeout is a timeout; anything else broke after
    the request went out."""
    route = f"POST {path}"
    if isinstance(exc, (http1.NotSent, aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError)):
        return TransportUnreachable(
            server, route, f"cannot connect to {url}: {exc}", "is the server running, and is the URL right?"
        )
    if isinstance(exc, TimeoutError):
        return TransportTimeout(
            server,
            route,
            f"no answer from {url} within {timeout:g} s" if timeout is not None else f"no answer from {url}",
            "the server is slow or stuck; raise the timeout in the server's config or the run's options",
        )
    return TransportPeerDrop(
        server,
        route,
        f"{url} dropped the connection after the request went out: {exc}",
        "the server process may have died or restarted; the request was not sent again",
    )


#: Sends of a request that provably never reached its server (refused, or a connection found closed
#: before a byte was written) before it fails as unreachable. A request that went out is never resent.
SEND_ATTEMPTS = 3


def _resend_delay(exc: BaseException, attempt: int) -> float | None:
    """Seconds to wait before sending again after ``exc`` ended try ``attempt``, or None: not again."""
    if attempt >= SEND_ATTEMPTS:
        return None
    if isinstance(exc, http1.NotSent):
        if exc.stale:
            return 0.0
        refused = exc.refused
    else:
        refused = isinstance(exc, aiohttp.ClientConnectorError) and isinstance(exc.os_error, ConnectionRefusedError)
    return backoff_delay(0.05, attempt, cap_s=0.5) if refused else None


async def _deliver(send, url: str, path: str, data: bytes, headers: dict[str, str], cookies: Cookies | None) -> Reply:
    """The one retry loop of every socket hop: send again only what provably never reached the server."""
    attempt = 1
    while True:
        try:
            return await send(url, path, data, headers, cookies)
        except Exception as exc:
            delay = _resend_delay(exc, attempt)
            if delay is None:
                raise
        attempt += 1
        if delay:
            await asyncio.sleep(delay)


async def _via_http1(url: str, path: str, data: bytes, headers: dict[str, str], cookies: Cookies | None) -> Reply:
    answer = await http1.post(url, path, data, headers, connect_timeout=CONNECT_TIMEOUT_S)
    if cookies is not None and answer.set_cookies:
        cookies.update_from_values(url, answer.set_cookies)
    return Reply(answer.status, answer.body)


async def _via_aiohttp(url: str, path: str, data: bytes, headers: dict[str, str], cookies: Cookies | None) -> Reply:
    """One send through aiohttp, which itself resends only idempotent methods (never a POST) and skips
    pooled connections it has seen closed."""
    bound = aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S)
    async with http_session().post(url + path, data=data, headers=headers, timeout=bound) as resp:
        if resp.status < 200:  # a 1xx as the final answer (an upgrade no hop asked for): no answer
            raise http1.BadAnswer(f"the server answered {resp.status} and switched protocols")
        body = await resp.read()
        if cookies is not None:
            cookies.update(url, resp)
        return Reply(resp.status, body)


#: What a socket hop raises when it got no whole answer (ValueErrors, a bad URL or header, are the caller's).
_BROKEN = (TimeoutError, OSError, aiohttp.ClientError)


async def post(
    url: str, path: str, payload: Any, cookies: Cookies | None = None, server: str = "", timeout: float | None = None
) -> Reply:
    """POST JSON and return the status and body, whatever the status.

    ``timeout`` bounds the whole exchange, resends included (None: only each connect is bounded).
    A request is sent again only when it provably never reached the server; a broken exchange
    raises a ``TransportError`` (unreachable, peer drop, timeout).
    """
    headers = {"Content-Type": "application/json"}
    if cookies is not None and (cookie := cookies.header(url)):
        headers["Cookie"] = cookie
    data = _dumps(payload)
    name = server or url
    local = inproc.lookup(url)
    if local is not None:
        return await _send_local(local, url, path, data, headers, cookies, timeout, name)
    send = _via_http1 if _plain(url) else _via_aiohttp
    try:
        async with asyncio.timeout(timeout):
            return await _deliver(send, url, path, data, headers, cookies)
    except _BROKEN as exc:
        if isinstance(exc, ValueError):
            raise
        raise transport_error(name, url, path, exc, timeout) from exc


_plain_urls: dict[str, bool] = {}


def _plain(url: str) -> bool:
    """Whether ``url``'s hops go through ``http1`` (a plain http:// server URL, httptools installed)."""
    plain = _plain_urls.get(url)
    if plain is None:
        plain = (
            http1.available()
            and os.environ.get("GYMLAB_HTTP_CLIENT", "").strip().lower() != "aiohttp"
            and http1.address_of(url) is not None
        )
        if len(_plain_urls) < 4096:
            _plain_urls[url] = plain
    return plain


async def _send_local(
    local: inproc.LocalApp,
    url: str,
    path: str,
    data: bytes,
    headers: dict[str, str],
    cookies: Cookies | None,
    timeout: float | None,
    name: str,
) -> Reply:
    """``post`` to a server of this Lab: into its ASGI app, with the same answer and failures."""
    try:
        async with asyncio.timeout(timeout):
            status, answer_headers, body = await inproc.call(local, "POST", path, data, headers)
    except (TimeoutError, inproc.AppDropped) as exc:
        raise transport_error(name, url, path, exc, timeout) from exc
    if cookies is not None:
        cookies.update_from_headers(url, answer_headers)
    return Reply(status, body)


async def post_ok(
    url: str, path: str, payload: Any, cookies: Cookies | None = None, server: str = "", timeout: float | None = None
) -> Any:
    """POST JSON and return the parsed answer; an error status raises ``ServerError`` carrying the
    typed ``failure`` the error body gave, if any."""
    return _parsed(await post(url, path, payload, cookies, server, timeout), path, server or url)


def _parsed(reply: Reply, path: str, server: str) -> Any:
    """The parsed body of a 2xx ``reply``; an error status or a body that is not JSON raises ``ServerError``."""
    if not reply.ok:
        raise ServerError(
            _server_name(reply.text, server),
            f"POST {path}",
            reply.status,
            error_message(reply.text),
            failure=failure_in(reply.text),
            trace=trace_in(reply.text),
        )
    try:
        return reply.json()
    except ValueError as exc:  # orjson.JSONDecodeError is a ValueError
        raise ServerError(server, f"POST {path}", reply.status, f"answer is not JSON: {reply.text[:200]!r}") from exc


async def ask_model_server(
    url: str, body: dict, *, server: str = "model server", timeout: float | None = None
) -> NeMoGymResponse:
    """``POST /v1/responses``: the model's response. An answer that is not a Responses object
    (no ``output`` list, or an error object) raises ``ServerError`` with a provider failure: a
    model's non-answer is never graded as an empty response."""
    reply = await post(url, "/v1/responses", body, server=server, timeout=timeout)
    if reply.ok:  # the common case, validated straight from the bytes in one pass
        try:
            response = NeMoGymResponse.model_validate_json(reply.body)
        except (ValueError, TypeError):
            response = None
        if response is not None and "output" in response.model_fields_set and not getattr(response, "error", None):
            return response
    answer = _parsed(reply, "/v1/responses", server)
    problem = None
    if not (isinstance(answer, dict) and isinstance(answer.get("output"), list)) or answer.get("error"):
        problem = "a body that is not a Responses object"
    else:
        try:
            return NeMoGymResponse.model_validate(answer)
        except (ValueError, TypeError) as exc:  # TypeError: a malformed discriminator (``{"type": {}}``)
            problem = f"a Responses object that does not validate ({str(exc).splitlines()[0]})"
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


def _dumps(payload: Any) -> bytes:
    """A request body: orjson, several times faster than the standard library on episode-sized
    bodies; a payload orjson refuses (a non-string key, an int past 64 bits) falls back to it."""
    try:
        return orjson.dumps(payload)
    except TypeError:
        return json.dumps(payload).encode()


def failure_in(text: str) -> Failure | None:
    """The typed ``failure`` of a gymlab error body, or None."""
    try:
        raw = json.loads(text)
    except ValueError:
        return None
    raw = raw.get("failure") if isinstance(raw, dict) else None
    if not isinstance(raw, dict):
        return None
    try:
        return Failure.model_validate(raw)
    except ValueError:
        return None


def trace_in(text: str) -> str | None:
    """The server's traceback a gymlab error body shared (``trace``), or None."""
    try:
        trace = json.loads(text).get("trace")
    except (ValueError, AttributeError):
        return None
    return trace if isinstance(trace, str) else None


def _server_name(text: str, fallback: str) -> str:
    """``fallback``, with the server's own name from a gymlab error body when it gave one."""
    try:
        name = json.loads(text).get("server")
    except (ValueError, AttributeError):
        return fallback
    return f"{fallback} '{name}'" if isinstance(name, str) and name and name != fallback else fallback


def error_message(text: str) -> str:
    """The human part of an error body (gymlab's ``detail``/``message``, or the raw text)."""
    try:
        body = json.loads(text)
    except ValueError:
        return text[:500]
    if isinstance(body, dict):
        for key in ("detail", "message", "error"):
            if isinstance(body.get(key), str):
                return body[key]
        if "detail" in body:
            return json.dumps(body["detail"])[:500]
    return text[:500]
