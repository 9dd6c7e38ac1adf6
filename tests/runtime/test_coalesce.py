"""A response's head and body leave in one send; a streamed body still streams; closing keeps the
bytes and their order. Against real loopback sockets and a real uvicorn server."""

from __future__ import annotations

import asyncio
import socket
import threading

import pytest

pytest.importorskip("httptools")

from gymlab._runtime import stack  # noqa: E402
from gymlab._runtime.coalesce import CoalescingHttpToolsProtocol, _Coalescing  # noqa: E402
from gymlab._runtime.serve import ThreadedServer  # noqa: E402


class _Counted:
    """A real transport, with its writes counted."""

    def __init__(self, transport):
        self.transport, self.writes = transport, []

    def write(self, data):
        self.writes.append(data)
        self.transport.write(data)

    def __getattr__(self, name):
        return getattr(self.transport, name)


async def _pair():
    """(coalescing writer over a counted real transport, the counter, a reader of the peer's bytes)."""
    loop = asyncio.get_running_loop()
    left, right = socket.socketpair()
    transport, _ = await loop.connect_accepted_socket(asyncio.Protocol, left)
    counted = _Counted(transport)
    reader, writer = await asyncio.open_connection(sock=right)
    return _Coalescing(counted, loop), counted, reader, writer


async def test_writes_in_one_turn_leave_as_one_send_and_later_turns_as_their_own():
    wrapped, counted, reader, writer = await _pair()
    wrapped.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    wrapped.write(b"{}")
    assert counted.writes == []  # nothing left yet: the turn is not over
    assert await asyncio.wait_for(reader.readexactly(40), 10) == b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"
    assert len(counted.writes) == 1
    wrapped.write(b"next")
    assert await asyncio.wait_for(reader.readexactly(4), 10) == b"next"
    assert len(counted.writes) == 2
    wrapped.close()
    writer.close()


async def test_close_sends_what_is_pending_first_and_abort_drops_it():
    wrapped, counted, reader, writer = await _pair()
    wrapped.write(b"last words")
    wrapped.close()
    assert await asyncio.wait_for(reader.read(), 10) == b"last words"  # then the end of the stream
    writer.close()

    wrapped, counted, reader, writer = await _pair()
    wrapped.write(b"never sent")
    wrapped.abort()
    assert await asyncio.wait_for(reader.read(), 10) == b""
    assert counted.writes == []
    writer.close()


def test_gymlab_servers_use_the_coalescing_protocol():
    pytest.importorskip("uvloop")
    assert stack.uvicorn_options()["http"] is CoalescingHttpToolsProtocol


def test_a_streamed_body_reaches_the_client_chunk_by_chunk():
    """The second chunk is only produced after the client has read the first: a server that held a
    response's writes until it was whole would never answer."""
    first_read = threading.Event()

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while (await receive())["type"] != "lifespan.shutdown":
                await send({"type": "lifespan.startup.complete"})
            await send({"type": "lifespan.shutdown.complete"})
            return
        await receive()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"one;", "more_body": True})
        await asyncio.get_running_loop().run_in_executor(None, first_read.wait, 30)
        await send({"type": "http.response.body", "body": b"two", "more_body": False})

    server = ThreadedServer(app, name="streamer").start()
    try:
        with socket.create_connection((server.host, server.port), timeout=30) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            seen = b""
            while b"one;" not in seen:
                seen += sock.recv(4096)
            assert b"two" not in seen
            first_read.set()
            while not seen.endswith(b"0\r\n\r\n"):
                seen += sock.recv(4096)
            assert b"3\r\ntwo\r\n" in seen
    finally:
        first_read.set()
        server.stop()
