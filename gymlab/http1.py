"""A keep-alive HTTP/1.1 POST for plain ``http://`` hops between servers, on httptools.

One attempt per call, never a request written twice: a failure is ``NotSent`` (nothing left this
machine; the caller may send again) or ``PeerDropped`` (after the request went out). ``https://``
and machines without httptools use ``AiohttpTransport``, the same ``post`` (docs/transport.md).
"""

from __future__ import annotations

import asyncio
import functools
import os
import select
import weakref
from collections import deque
from urllib.parse import urlsplit

import aiohttp

try:
    import httptools
except ImportError:  # pragma: no cover - httptools is a dependency where the platform has wheels
    httptools = None

#: Idle connections kept per address (more are closed when they come back).
MAX_IDLE = 256
#: Bytes an answer's status line and headers may take (aiohttp allows 8 KiB a line; uvicorn's h11, 16 KiB in all).
MAX_HEAD = 64 * 1024


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


class NotSent(ConnectionError):
    """No byte of the request left this machine: the caller may send it again. ``refused`` when the
    server's port refused the connection (as opposed to an unknown host or a connect timeout)."""

    def __init__(self, message: str, *, refused: bool = False, stale: bool = False):
        super().__init__(message)
        self.refused, self.stale = refused, stale


class PeerDropped(ConnectionError):
    """The peer closed or reset the connection after the request went out, before its answer was whole."""


class BadAnswer(PeerDropped):
    """The peer's bytes are not an HTTP/1.1 answer, or one too large (the connection is closed)."""


class AnswerTooLarge(BadAnswer):
    """The answer's body is over ``MAX_ANSWER`` bytes: cut where it passed the cap, never held whole."""


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
        self._fd = -1
        self._poll = None
        self._parser = httptools.HttpResponseParser(self)
        self._waiter: asyncio.Future | None = None
        self._interim = 0
        self._reset()

    def _reset(self) -> None:
        """Forget the answer read so far (a new exchange, or an interim answer that was read)."""
        self._body: list[bytes] = []
        self._cookies: list[bytes] = []
        self._seen = self._body_size = self._head_size = 0
        self._head_done = self._sized = self._complete = self._keep_alive = False

    # -- asyncio.Protocol --

    def connection_made(self, transport) -> None:
        self.transport = transport
        sock = transport.get_extra_info("socket")
        self._fd = sock.fileno() if sock is not None else -1
        if self._fd >= 0:
            self._poll = select.poll()  # registered once, polled before each reuse
            self._poll.register(self._fd, select.POLLIN)

    def data_received(self, data: bytes) -> None:
        if self._waiter is None:  # bytes on an idle connection answer nothing we asked: never reuse it
            self.close()
            return
        self._seen += len(data)
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self._fail(BadAnswer("the server asked to upgrade the connection"))
        except httptools.HttpParserError as exc:
            self._fail(BadAnswer(f"the answer is not HTTP/1.1: {exc}"))
        else:
            if not self._head_done and self._seen > MAX_HEAD:
                self._fail(BadAnswer(f"the answer's head is over {MAX_HEAD} bytes"))

    def connection_lost(self, exc) -> None:
        self.closed = True
        waiter, self._waiter = self._waiter, None
        if waiter is None or waiter.done():
            return
        if exc is None and self._head_done and not self._sized:  # a close-delimited body ends here
            waiter.set_result(Answer(self._parser.get_status_code(), b"".join(self._body), self._cookies))
            return
        cause = f": {exc}" if exc else ""
        waiter.set_exception(PeerDropped(f"the connection closed before the answer was whole{cause}"))

    # -- httptools callbacks --

    def on_message_begin(self) -> None:
        if self._waiter is None:  # a second answer in the same bytes as the first: never reuse the connection
            self.closed = True

    def on_status(self, status: bytes) -> None:
        self._head_size += len(status)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._head_size += len(name) + len(value)  # a head read in one piece passes no read's check
        if self._head_size > MAX_HEAD:
            self._fail(BadAnswer(f"the answer's head is over {MAX_HEAD} bytes"))
            return
        name = name.lower()
        if name == b"set-cookie":
            self._cookies.append(value)
        elif name == b"content-length" or (name == b"transfer-encoding" and value.lower().endswith(b"chunked")):
            self._sized = True

    def on_headers_complete(self) -> None:
        if self._parser.get_status_code() < 100:
            self._fail(BadAnswer(f"the answer's status {self._parser.get_status_code()} is no HTTP status"))
        self._head_done = True
        self._keep_alive = self._parser.should_keep_alive()  # read here: the parser forgets it after the body

    def on_body(self, body: bytes) -> None:
        self._body_size += len(body)
        if self._body_size > MAX_ANSWER:
            self._fail(AnswerTooLarge(f"the answer's body is over {MAX_ANSWER} bytes (GYMLAB_MAX_ANSWER_MIB)"))
            self._body.clear()
            return
        self._body.append(body)

    def on_message_complete(self) -> None:
        status = self._parser.get_status_code()
        if 100 <= status < 200:  # an interim answer (100 Continue): the real one follows
            self._interim += 1
            if self._interim > MAX_INTERIM:
                self._fail(BadAnswer(f"more than {MAX_INTERIM} interim (1xx) answers"))
            self._reset()
            return
        self._complete = True
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(Answer(status, b"".join(self._body), self._cookies))

    # -- use --

    def _fail(self, exc: BaseException) -> None:
        waiter, self._waiter = self._waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(exc)
        self.abort()

    def close(self) -> None:
        self.closed = True
        self.transport.close()

    def abort(self) -> None:
        self.closed = True
        self.transport.abort()

    def reusable(self) -> bool:
        return not self.closed and self._complete and self._keep_alive

    def idle_and_open(self) -> bool:
        """Whether this pooled connection can carry a request: open, and its socket not readable (an
        idle connection the peer closed, reset or wrote to is readable before the loop has seen it)."""
        if self.closed or self._poll is None or self.transport.is_closing():
            return False
        return not self._poll.poll(0)  # any event (readable, hung up, an error) ends its use

    async def exchange(self, request: bytes) -> Answer:
        self._interim = 0
        self._reset()
        self._waiter = waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        if self.transport.is_closing():  # the write failed at once (the peer had reset): nothing was sent
            self._waiter = None
            raise NotSent("the connection was found closed as the request was written", stale=True)
        return await waiter


class _Pool:
    """Idle connections of one event loop, by address."""

    def __init__(self) -> None:
        self.idle: dict[tuple[str, int], deque[_Connection]] = {}

    def take(self, address: tuple[str, int]) -> _Connection | None:
        """The most recently used open idle connection; closed ones met on the way are discarded."""
        idle = self.idle.get(address)
        while idle:
            conn = idle.pop()
            if conn.idle_and_open():
                return conn
            conn.abort()
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


@functools.lru_cache(maxsize=4096)  # a run posts to a handful of URLs, thousands of times each
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
    try:
        async with asyncio.timeout(connect_timeout):
            _, conn = await loop.create_connection(_Connection, host, port)
    except TimeoutError as exc:
        raise NotSent(f"no connection within {connect_timeout:g} s") from exc
    except OSError as exc:  # refused, unknown host, no route
        raise NotSent(f"cannot connect: {exc}", refused=isinstance(exc, ConnectionRefusedError)) from exc
    return conn


class Transport:
    """This module's connections, one pool per event loop: what a ``gymlab.client.Client`` holds."""

    def __init__(self) -> None:
        self._pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Pool] = weakref.WeakKeyDictionary()

    def pool(self) -> _Pool:
        """The running loop's pool (made on first use)."""
        loop = asyncio.get_running_loop()
        pool = self._pools.get(loop)
        if pool is None:
            pool = self._pools[loop] = _Pool()
        return pool

    def close(self) -> None:
        """Close the running loop's idle connections."""
        pool = self._pools.pop(asyncio.get_running_loop(), None)
        if pool is not None:
            pool.close()

    async def post(
        self, url: str, path: str, data: bytes, headers: dict[str, str], *, connect_timeout: float
    ) -> Answer:
        """POST ``data`` to ``url + path`` once, on a pooled connection or a new one: ``NotSent`` when
        nothing was written, ``PeerDropped`` when it broke after; the caller's own bound raises ``TimeoutError``."""
        if " " in path or "\r" in path or "\n" in path or not path.startswith("/"):
            raise ValueError(f"path {path!r}: must start with / and hold no spaces or line breaks")
        address = address_of(url)
        if address is None:
            raise ValueError(f"{url!r} is not a plain http:// server URL")
        host, port, host_header = address
        request = _request(host_header, path, data, headers)
        pool = self.pool()
        key = (host, port)
        conn = pool.take(key) or await _connect(host, port, connect_timeout)
        try:
            answer = await conn.exchange(request)
        except BaseException:
            conn.abort()  # dropped, stale or interrupted mid-exchange (timeout, cancel, bad bytes): never reused
            raise
        if conn.reusable():
            pool.give(key, conn)
        else:
            conn.close()
        return answer


class _CountedResponse(aiohttp.ClientResponse):
    """aiohttp's answer with the interim (1xx) answers before it counted: aiohttp reads them in a loop
    without end, so a server that never stops sending them is cut after ``MAX_INTERIM``."""

    async def start(self, connection):
        protocol = connection.protocol
        read, heads = protocol.read, 0

        async def counted():
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


class AiohttpTransport:
    """The same ``post`` through aiohttp, one session per event loop: ``https://`` hops, and plain ones
    where httptools is not used."""

    def __init__(self) -> None:
        self._sessions: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, aiohttp.ClientSession] = (
            weakref.WeakKeyDictionary()
        )

    def session(self) -> aiohttp.ClientSession:
        """The running loop's session (made on first use)."""
        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is None or session.closed:
            session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0, ttl_dns_cache=None),
                cookie_jar=aiohttp.DummyCookieJar(),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=30),
                response_class=_CountedResponse,
            )
            self._sessions[loop] = session
        return session

    def has_session(self) -> bool:
        session = self._sessions.get(asyncio.get_running_loop())
        return session is not None and not session.closed

    async def close(self) -> None:
        """Close the running loop's session."""
        session = self._sessions.pop(asyncio.get_running_loop(), None)
        if session is not None and not session.closed:
            await session.close()

    async def post(
        self, url: str, path: str, data: bytes, headers: dict[str, str], *, connect_timeout: float
    ) -> Answer:
        """``Transport.post`` through aiohttp (its own errors: ``ClientConnectorError`` sent nothing)."""
        bound = aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout)
        async with self.session().post(url + path, data=data, headers=headers, timeout=bound) as resp:
            if resp.status < 200:  # a 1xx as the final answer (an upgrade no hop asked for): no answer
                raise BadAnswer(f"the server answered {resp.status}, which is no final answer")
            body = await read_capped(resp)
            cookies = resp.headers.getall("Set-Cookie", ())
            return Answer(resp.status, body, [value.encode("utf-8", "surrogateescape") for value in cookies])


async def read_capped(resp: aiohttp.ClientResponse) -> bytes:
    """An aiohttp answer's body, cut with ``AnswerTooLarge`` once past ``MAX_ANSWER`` bytes (sized or not);
    the connection is closed then (aiohttp would otherwise wait for the body's end on release)."""
    chunks, size = [], resp.content_length or 0
    if size <= MAX_ANSWER:
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


#: The transport of callers that name none (``post``, ``close_pool``).
DEFAULT = Transport()
post, close_pool = DEFAULT.post, DEFAULT.close


__all__ = [
    "DEFAULT",
    "MAX_ANSWER",
    "AiohttpTransport",
    "Answer",
    "AnswerTooLarge",
    "BadAnswer",
    "NotSent",
    "PeerDropped",
    "Transport",
    "address_of",
    "available",
    "close_pool",
    "post",
    "read_capped",
]
