"""A keep-alive HTTP/1.1 POST for plain ``http://`` hops between servers, on httptools.

Every hop of an episode (agent to environment, agent to model, collector to agent) is a small JSON
POST on loopback or a local network. aiohttp's client spends about 90 us of CPU on one such POST
here; a connection that writes the request in one call and parses the answer with httptools (the
parser uvicorn's servers already use) spends about 27 us, the rest being the kernel's own cost.
Measured on a 2-core machine in the same run (``gymlab bench`` shows the episode-level effect).

Only what a hop needs: POST, a body of known length, keep-alive connections pooled per event loop
and address, the answer's status, body and ``Set-Cookie`` headers. ``https://`` URLs, and machines
without httptools, go through aiohttp (``gymlab.client``). Failures are typed, never read from text:
``ConnectionRefusedError`` and the other ``OSError``s of connecting (unreachable), ``PeerDropped``
(the peer closed or reset the connection before its answer was whole, or sent bytes that are no
answer), ``TimeoutError`` from the caller's own bound. A connection is reused only after a whole answer that allows it; one that was
interrupted (a timeout, a cancel, a drop) is closed, so the server sees the hang-up.
"""

from __future__ import annotations

import asyncio
import functools
import weakref
from collections import deque
from urllib.parse import urlsplit

try:
    import httptools
except ImportError:  # pragma: no cover - httptools is a dependency where the platform has wheels
    httptools = None

#: Idle connections kept per address (more are closed when they come back).
MAX_IDLE = 256


class PeerDropped(ConnectionError):
    """The peer closed or reset the connection before its answer was whole."""


class BadAnswer(PeerDropped):
    """The peer's bytes are not an HTTP/1.1 answer (the connection is closed: a drop, as the caller sees it)."""


def available() -> bool:
    return httptools is not None


class Answer:
    """A whole answer: status, body and ``Set-Cookie`` header values."""

    __slots__ = ("status", "body", "set_cookies")

    def __init__(self, status: int, body: bytes, set_cookies: list[bytes]):
        self.status, self.body, self.set_cookies = status, body, set_cookies


class _Connection(asyncio.Protocol):
    """One keep-alive connection: one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future | None = None
        self._body: list[bytes] = []
        self._cookies: list[bytes] = []
        self._header: bytes = b""
        self._started = False
        self._complete = False
        self._keep_alive = False

    # -- asyncio.Protocol --

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(BadAnswer("the server asked to upgrade the connection"))
        except httptools.HttpParserError as exc:
            self._fail(BadAnswer(f"the answer is not HTTP/1.1: {exc}"))

    def connection_lost(self, exc) -> None:
        self.closed = True
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            cause = f": {exc}" if exc else ""
            waiter.set_exception(PeerDropped(f"the connection closed before the answer was whole{cause}"))

    # -- httptools callbacks --

    def on_message_begin(self) -> None:
        self._started = True

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() == b"set-cookie":
            self._cookies.append(value)

    def on_headers_complete(self) -> None:
        self._keep_alive = self._parser.should_keep_alive()  # read here: the parser forgets it after the body

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # an interim answer (100 Continue): the real one follows
            self._body, self._cookies, self._started = [], [], False
            return
        self._complete = True
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(Answer(status, b"".join(self._body), self._cookies))

    # -- use --

    def _fail(self, exc: BaseException) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def reusable(self) -> bool:
        return not self.closed and self._complete and self._keep_alive

    async def exchange(self, request: bytes) -> Answer:
        self._body, self._cookies, self._started, self._complete = [], [], False, False
        self._waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return await self._waiter


class _Pool:
    """Idle connections of one event loop, by address."""

    def __init__(self) -> None:
        self.idle: dict[tuple[str, int], deque[_Connection]] = {}

    def drop(self, address: tuple[str, int]) -> None:
        """Close the address's idle connections (one of them was stale: the rest likely are too)."""
        for conn in self.idle.pop(address, ()):
            conn.close()

    def take(self, address: tuple[str, int]) -> _Connection | None:
        idle = self.idle.get(address)
        while idle:
            conn = idle.pop()
            if not conn.closed:
                return conn
        return None

    def give(self, address: tuple[str, int], conn: _Connection) -> None:
        idle = self.idle.setdefault(address, deque())
        if len(idle) >= MAX_IDLE:
            conn.close()
        else:
            idle.append(conn)

    def close(self) -> None:
        for idle in self.idle.values():
            for conn in idle:
                conn.close()
        self.idle.clear()


_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Pool] = weakref.WeakKeyDictionary()


def _pool() -> _Pool:
    loop = asyncio.get_running_loop()
    pool = _pools.get(loop)
    if pool is None:
        pool = _pools[loop] = _Pool()
    return pool


def close_pool() -> None:
    """Close the running loop's idle connections."""
    pool = _pools.pop(asyncio.get_running_loop(), None)
    if pool is not None:
        pool.close()


@functools.lru_cache(maxsize=1024)  # a run posts to a handful of URLs, thousands of times each
def address_of(url: str) -> tuple[str, int, bytes] | None:
    """(host, port, Host header) of a plain ``http://`` URL with no path, or None."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or parts.path not in ("", "/") or parts.query:
        return None
    try:
        port = parts.port or 80
    except ValueError:
        return None
    return parts.hostname, port, parts.netloc.rsplit("@", 1)[-1].encode("idna")


def _request(host: bytes, path: str, data: bytes, headers: dict[str, str]) -> bytes:
    lines = [b"POST ", path.encode("utf-8"), b" HTTP/1.1\r\nHost: ", host, b"\r\nContent-Length: ", b"%d" % len(data)]
    for key, value in headers.items():
        if "\r" in value or "\n" in value or "\r" in key or "\n" in key:
            raise ValueError(f"header {key!r}: a value may not hold a line break")
        lines += (b"\r\n", key.encode("latin-1"), b": ", value.encode("latin-1"))
    lines += (b"\r\n\r\n", data)
    return b"".join(lines)


async def _connect(host: str, port: int, connect_timeout: float) -> _Connection:
    loop = asyncio.get_running_loop()
    async with asyncio.timeout(connect_timeout):
        _, conn = await loop.create_connection(_Connection, host, port)
    return conn


async def post(url: str, path: str, data: bytes, headers: dict[str, str], *, connect_timeout: float) -> Answer:
    """POST ``data`` to ``url + path`` on a pooled connection (``url`` as ``address_of`` accepts).

    A pooled connection the peer dropped before answering (a keep-alive the server closed, a worker
    that restarted) is retried once on a new connection; a new connection that drops raises.
    """
    if " " in path or "\r" in path or "\n" in path or not path.startswith("/"):
        raise ValueError(f"path {path!r}: must start with / and hold no spaces or line breaks")
    address = address_of(url)
    if address is None:
        raise ValueError(f"{url!r} is not a plain http:// server URL")
    host, port, host_header = address
    request = _request(host_header, path, data, headers)
    pool = _pool()
    key = (host, port)
    conn = pool.take(key)
    while True:
        fresh = conn is None
        if fresh:
            conn = await _connect(host, port, connect_timeout)
        try:
            answer = await conn.exchange(request)
        except PeerDropped:
            conn.abort()
            if fresh:
                raise
            pool.drop(key)
            conn = None  # a stale keep-alive: once more, on a new connection
            continue
        except BaseException:
            conn.abort()  # interrupted mid-exchange (timeout, cancel, bad bytes): never reused
            raise
        if conn.reusable():
            pool.give(key, conn)
        else:
            conn.close()
        return answer
