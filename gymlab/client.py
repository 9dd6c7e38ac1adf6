"""HTTP between servers: one shared aiohttp session per event loop, cookies kept per rollout.

aiohttp is the async hot path (DESIGN.md: 6,600 req/s at 16 concurrent vs 540 for httpx). The
session's own cookie jar is disabled: each rollout carries its own ``Cookies`` so concurrent
rollouts never share a session, while all of them share one connection pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import weakref
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from gymlab.errors import ServerError

_sessions: "weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aiohttp.ClientSession]" = (
    weakref.WeakKeyDictionary()
)


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
    """Close the running loop's session (servers call this on shutdown)."""
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
            jar = self.by_url.setdefault(url, {})
            for key, morsel in response.cookies.items():
                jar[key] = morsel.value


@dataclass
class Reply:
    status: int
    text: str

    def json(self) -> Any:
        return json.loads(self.text)

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300


async def post(url: str, path: str, payload: Any, cookies: Cookies | None = None, server: str = "") -> Reply:
    """POST JSON and return the status and body, whatever the status."""
    headers = {"Content-Type": "application/json"}
    if cookies is not None and (cookie := cookies.header(url)):
        headers["Cookie"] = cookie
    try:
        async with http_session().post(url + path, data=json.dumps(payload), headers=headers) as resp:
            text = await resp.text()
            if cookies is not None:
                cookies.update(url, resp)
            return Reply(resp.status, text)
    except aiohttp.ClientConnectionError as exc:
        raise ServerError(server or url, f"POST {path}", 0, f"cannot connect to {url}: {exc}",
                          "is the server running, and is the URL right?") from exc


async def post_ok(url: str, path: str, payload: Any, cookies: Cookies | None = None, server: str = "") -> Any:
    """POST JSON and return the parsed answer; an error status raises ``ServerError``."""
    reply = await post(url, path, payload, cookies, server)
    if not reply.ok:
        raise ServerError(_server_name(reply.text, server or url), f"POST {path}", reply.status, error_message(reply.text))
    try:
        return reply.json()
    except ValueError as exc:
        raise ServerError(server or url, f"POST {path}", reply.status, f"answer is not JSON: {reply.text[:200]!r}") from exc


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
