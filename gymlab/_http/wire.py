"""The socket transport: aiohttp, one session per event loop, every answer capped (docs/transport.md)."""

from __future__ import annotations

import asyncio
import os
import select
import weakref
from typing import Any

import aiohttp
from aiohttp.client_proto import ResponseHandler
from aiohttp.client_reqrep import ConnectionKey
from aiohttp.connector import Connection
from aiohttp.tracing import Trace

#: An answer's status, headers (raw, as received) and body.
Answer = tuple[int, list[tuple[bytes, bytes]], bytes]


def _answer_cap(default_mib: float = 32) -> int:
    """``GYMLAB_MAX_ANSWER_MIB`` in bytes (a positive number of MiB), else ``default_mib``."""
    raw = os.environ.get("GYMLAB_MAX_ANSWER_MIB") or str(default_mib)
    try:
        mib = float(raw)
    except ValueError:
        mib = 0.0
    if not 0 < mib < 2**20:
        raise ValueError(f"GYMLAB_MAX_ANSWER_MIB={raw!r}: give the largest answer a hop may take, in MiB (e.g. 32)")
    return int(mib * 2**20)


#: Bytes one answer may take on any hop (every transport, the model proxy's upstream): a hop's JSON is
#: far smaller; an endless answer is cut here. ``GYMLAB_MAX_ANSWER_MIB`` sets it (read at import).
MAX_ANSWER = _answer_cap()
#: Interim (1xx) answers read before the real one: a server that never stops sending them is cut.
MAX_INTERIM = 16


class BadAnswer(ConnectionError):
    """The peer's bytes are no whole final answer, or one too large (the connection is closed)."""


class AnswerTooLarge(BadAnswer):
    """The answer's body is over ``MAX_ANSWER`` bytes: cut where it passed the cap, never held whole."""


class _CountedResponse(aiohttp.ClientResponse):
    """aiohttp's answer with the interim (1xx) answers before it counted: aiohttp reads them in a loop
    without end, so a server that never stops sending them is cut after ``MAX_INTERIM``."""

    async def start(self, connection: Any) -> Any:
        protocol = connection.protocol
        read, heads = protocol.read, 0

        async def counted() -> Any:
            nonlocal heads
            heads += 1
            if heads > MAX_INTERIM + 1:
                raise BadAnswer(f"more than {MAX_INTERIM} interim (1xx) answers")
            return await read()

        protocol.read = counted
        try:
            return await super().start(connection)
        finally:
            del protocol.read


def _stale(proto: ResponseHandler) -> bool:
    """Whether an idle pooled connection is readable: its peer closed it (or wrote unasked), and the
    loop has not run since to see it; writing a request into it would lose the request."""
    sock = proto.transport.get_extra_info("socket") if proto.transport is not None else None
    return sock is not None and bool(select.select([sock.fileno()], [], [], 0)[0])


class _CheckedConnector(aiohttp.TCPConnector):
    """aiohttp's connector, never handing out a pooled connection its peer already closed."""

    async def _get(self, key: ConnectionKey, traces: list[Trace]) -> Connection | None:
        for proto, _ in self._conns.get(key, ()):
            if not _stale(proto):
                break
            proto.close()  # not connected now: aiohttp drops it and takes the next, or a new connection
        return await super()._get(key, traces)


async def read_capped(resp: aiohttp.ClientResponse) -> bytes:
    """An answer's body, cut with ``AnswerTooLarge`` once past ``MAX_ANSWER`` bytes (sized or not);
    the connection is closed then (aiohttp would otherwise wait for the body's end on release)."""
    size = resp.content_length
    if size is not None and size <= MAX_ANSWER:  # sized within the cap: read whole, in one call
        return await resp.read()
    if size is None:  # unsized (chunked, close-delimited): counted as it arrives
        chunks: list[bytes] = []
        size = 0
        async for chunk in resp.content.iter_any():
            size += len(chunk)
            if size > MAX_ANSWER:
                break
            chunks.append(chunk)
        else:
            return b"".join(chunks)
    resp.close()
    raise AnswerTooLarge(f"the answer's body is over {MAX_ANSWER} bytes (GYMLAB_MAX_ANSWER_MIB)")


class AiohttpTransport:
    """Requests over sockets through aiohttp: one session per event loop (a session is bound to one)."""

    def __init__(self) -> None:
        self._sessions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aiohttp.ClientSession] = (
            weakref.WeakKeyDictionary()
        )
        self._timeouts: dict[float, aiohttp.ClientTimeout] = {}  # one per connect timeout: made once

    def session(self) -> aiohttp.ClientSession:
        """The running loop's session (made on first use)."""
        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is None or session.closed:
            session = aiohttp.ClientSession(
                connector=_CheckedConnector(limit=0, ttl_dns_cache=None),
                cookie_jar=aiohttp.DummyCookieJar(),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
                response_class=_CountedResponse,
            )
            self._sessions[loop] = session
        return session

    async def send(
        self, method: str, url: str, data: bytes | None, headers: dict[str, str], *, connect_timeout: float
    ) -> Answer:
        """One exchange (aiohttp's errors: ``ClientConnectorError`` sent nothing)."""
        bound = self._timeouts.get(connect_timeout)
        if bound is None:
            bound = self._timeouts[connect_timeout] = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout)
        async with self.session().request(method, url, data=data, headers=headers, timeout=bound) as resp:
            if resp.status < 200:  # a 1xx as the final answer (an upgrade no hop asked for): no answer
                raise BadAnswer(f"the server answered {resp.status}, which is no final answer")
            return resp.status, list(resp.raw_headers), await read_capped(resp)

    async def close(self) -> None:
        """Close the running loop's session."""
        session = self._sessions.pop(asyncio.get_running_loop(), None)
        if session is not None and not session.closed:
            await session.close()
