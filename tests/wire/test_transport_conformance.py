"""HTTP/1.1 client conformance of the socket transport (aiohttp), against raw-socket servers on 127.0.0.1.

Each server is a blocking socket in a thread of its own, so it acts while the client's event loop is
busy or blocked: a close "just as the request goes out" is a real FIN in the client's socket that
the loop has not seen yet. Every test runs through a ``gymlab._http.client.Client`` (the resend loop
and the typed failures included).
"""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import select
import socket
import struct
import threading

import pytest

from gymlab._http import client
from gymlab.errors import (
    ServerError,
    TransportError,
    TransportPeerDrop,
    TransportTimeout,
    TransportUnreachable,
)
from gymlab.failures import run_failure

WAIT_S = 30  # a bound on every wait for a condition; a passing test never reaches it


class Peer:
    """One accepted connection, as a handler sees it; its requests are recorded on ``server``, if any."""

    def __init__(self, sock: socket.socket, number: int, server: RawServer | None = None):
        self.server, self.sock, self.number = server, sock, number
        self.buffer = b""

    def read_request(self) -> bytes | None:
        """The next request's body (recorded on the server), or None when the client closed first."""
        while b"\r\n\r\n" not in self.buffer:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buffer += chunk
        head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
        length = next(
            (int(line.split(b":", 1)[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")),
            0,
        )
        while len(self.buffer) < length:
            chunk = self.sock.recv(65536)
            if not chunk:
                return None
            self.buffer += chunk
        body, self.buffer = self.buffer[:length], self.buffer[length:]
        if self.server is not None:
            with self.server.changed:
                self.server.requests.append((self.number, head.split(b"\r\n", 1)[0], body))
                self.server.changed.notify_all()
        return body

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def reset(self) -> None:
        """Close with a reset (RST), as a crashed process's kernel does."""
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.sock.close()


class RawServer:
    """A TCP server on 127.0.0.1: each connection runs ``handler(peer)`` in a thread, then is closed."""

    def __init__(self, handler):
        self.handler = handler
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.listener.getsockname()[1]}"
        self.requests: list[tuple[int, bytes, bytes]] = []  # (connection number, request line, body)
        self.connections = 0
        self.closed_connections = 0
        self.changed = threading.Condition()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while True:
            try:
                sock, _ = self.listener.accept()
            except OSError:
                return
            with self.changed:
                self.connections += 1
                number = self.connections
            threading.Thread(target=self._serve, args=(Peer(sock, number, self),), daemon=True).start()

    def _serve(self, peer: Peer) -> None:
        try:
            self.handler(peer)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                peer.sock.close()
            with self.changed:
                self.closed_connections += 1
                self.changed.notify_all()

    def bodies(self) -> list[bytes]:
        with self.changed:
            return [body for _, _, body in self.requests]

    async def wait_for(self, predicate) -> None:
        def wait() -> None:
            with self.changed:
                assert self.changed.wait_for(predicate, WAIT_S), "the server never reached the expected state"

        await asyncio.to_thread(wait)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.listener.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept
        self.listener.close()
        self.thread.join(WAIT_S)


def answer(body: bytes = b'{"ok": true}', status: str = "200 OK", extra: bytes = b"") -> bytes:
    return b"HTTP/1.1 %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s\r\n%s" % (
        status.encode(),
        len(body),
        extra,
        body,
    )


def keep_answering(peer: Peer) -> None:
    while (body := peer.read_request()) is not None:
        peer.send(answer(b'{"got": %s, "connection": %d}' % (body, peer.number)))


@pytest.fixture
async def hop():
    """A ``Client`` of its own (registry and connections), closed after the test."""
    async with client.Client() as own:
        yield own


@pytest.fixture
def serve():
    """Start raw servers with ``serve(handler)``; all are closed at the end."""
    servers: list[RawServer] = []

    def start(handler) -> RawServer:
        servers.append(RawServer(handler))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


# -- answers that must be read ---------------------------------------------------------------------


async def test_a_close_delimited_answer_is_read(serve, hop):
    def close_delimited(peer: Peer) -> None:
        peer.read_request()
        peer.send(b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n\r\n{"whole": ')
        peer.send(b'"until the close"}')  # then the server closes: the body ends with the connection

    server = serve(close_delimited)
    assert await hop.post_ok(server.url, "/x", {}) == {"whole": "until the close"}
    assert await hop.post_ok(server.url, "/x", {}) == {"whole": "until the close"}  # on a new connection
    assert server.connections == 2


async def test_an_http_1_0_answer_without_length_is_read(serve, hop):
    def old(peer: Peer) -> None:
        peer.read_request()
        peer.send(b'HTTP/1.0 201 Created\r\nContent-Type: application/json\r\n\r\n{"v": 1}')

    server = serve(old)
    reply = await hop.post(server.url, "/x", {})
    assert (reply.status, reply.json()) == (201, {"v": 1})


async def test_a_chunked_answer_with_extensions_and_trailers_is_read_and_the_connection_reused(serve, hop):
    def chunked(peer: Peer) -> None:
        while peer.read_request() is not None:
            peer.send(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nSet-Cookie: c=1; path=/\r\n\r\n")
            peer.send(b'4;ext=1\r\n{"a"\r\n')
            peer.send(b"5\r\n: [1,\r\n3\r\n 2]\r\n1\r\n}\r\n0\r\nX-Trailer: t\r\n\r\n")

    server = serve(chunked)
    jar = client.Cookies()
    assert await hop.post_ok(server.url, "/x", {}, cookies=jar) == {"a": [1, 2]}
    assert await hop.post_ok(server.url, "/x", {}, cookies=jar) == {"a": [1, 2]}
    assert server.connections == 1 and jar.header(server.url) == "c=1"


async def test_interim_1xx_answers_are_skipped_for_the_final_one(serve, hop):
    def interim(peer: Peer) -> None:
        while peer.read_request() is not None:
            peer.send(b"HTTP/1.1 100 Continue\r\n\r\n")
            peer.send(b"HTTP/1.1 103 Early Hints\r\nLink: </a.css>; rel=preload\r\n\r\n")
            peer.send(answer(b'{"final": true}'))

    server = serve(interim)
    for _ in range(2):
        reply = await hop.post(server.url, "/x", {})
        assert (reply.status, reply.json()) == (200, {"final": True})
    assert server.connections == 1


@pytest.mark.parametrize("status", ["204 No Content", "304 Not Modified"])
async def test_answers_that_have_no_body_end_at_their_head(serve, hop, status):
    def bodiless(peer: Peer) -> None:
        while peer.read_request() is not None:
            peer.send(b"HTTP/1.1 %s\r\nETag: x\r\n\r\n" % status.encode())

    server = serve(bodiless)
    for _ in range(3):  # each answer ends at its head, without a close: the connection carries the next
        reply = await asyncio.wait_for(hop.post(server.url, "/x", {}), WAIT_S)
        assert (reply.status, reply.body) == (int(status[:3]), b"")
    assert server.connections == 1


async def test_connection_close_is_honoured(serve, hop):
    def once_each(peer: Peer) -> None:
        peer.read_request()
        peer.send(answer(b'{"n": %d}' % peer.number, extra=b"Connection: close\r\n"))
        peer.sock.shutdown(socket.SHUT_WR)
        peer.read_request()  # the client closes its end too

    server = serve(once_each)
    assert [(await hop.post_ok(server.url, "/x", {"i": i}))["n"] for i in range(3)] == [1, 2, 3]
    assert server.bodies() == [b'{"i":0}', b'{"i":1}', b'{"i":2}']


# -- a pooled connection the server closed: sent again only when it provably never left ------------


async def test_an_idle_connection_the_server_closed_is_replaced_transparently(serve, hop):
    def one_then_close(peer: Peer) -> None:
        if peer.read_request() is not None:
            peer.send(answer())

    server = serve(one_then_close)
    await hop.post_ok(server.url, "/x", {"i": 1})
    await server.wait_for(lambda: server.closed_connections == 1)
    await hop.post_ok(server.url, "/x", {"i": 2})
    assert server.bodies() == [b'{"i":1}', b'{"i":2}'] and server.connections == 2


async def test_an_idle_connection_closed_as_the_request_goes_out(serve, hop):
    """The server's FIN is in the client's socket, but the client's loop has not run since: the loop
    still counts the connection open. The client polls the socket before reusing it and takes a new
    connection, so the request is neither lost nor sent twice."""
    close_now = threading.Event()

    def answer_then_close_on_signal(peer: Peer) -> None:
        if peer.number == 1:
            peer.read_request()
            peer.send(answer())
            close_now.wait(WAIT_S)
            return  # closed by the server loop
        keep_answering(peer)

    server = serve(answer_then_close_on_signal)
    await hop.post_ok(server.url, "/x", {"i": 1})
    client_socket = _aiohttp_pooled(hop).transport.get_extra_info("socket").fileno()
    close_now.set()  # from here to the next post, the loop does not run: it cannot see the close
    with server.changed:
        assert server.changed.wait_for(lambda: server.closed_connections == 1, WAIT_S)
    assert select.select([client_socket], [], [], WAIT_S)[0]  # the FIN has reached the client's socket
    assert (await hop.post_ok(server.url, "/x", {"i": 2}))["connection"] == 2
    assert server.bodies() == [b'{"i":1}', b'{"i":2}']


def _aiohttp_pooled(hop: client.Client):
    """aiohttp's one idle pooled connection (its protocol), or None when it kept none."""
    pooled = [proto for conns in hop.transport.session().connector._conns.values() for proto, _ in conns]
    assert len(pooled) <= 1
    return pooled[0] if pooled else None


@pytest.mark.parametrize("how", ["reset", "writes then closes"])
async def test_an_idle_connection_the_server_reset_or_wrote_to_is_replaced(serve, hop, how):
    def answer_then_end(peer: Peer) -> None:
        if peer.number > 1:
            return keep_answering(peer)
        peer.read_request()
        peer.send(answer())
        if how == "reset":
            peer.reset()
        else:  # what a server does when its keep-alive timer ends: a 408, then the close
            peer.send(answer(b"{}", "408 Request Timeout", b"Connection: close\r\n"))

    server = serve(answer_then_end)
    await hop.post_ok(server.url, "/x", {"i": 1})
    await server.wait_for(lambda: server.closed_connections == 1)
    assert (await hop.post_ok(server.url, "/x", {"i": 2}))["connection"] == 2
    assert server.bodies() == [b'{"i":1}', b'{"i":2}']


# -- a request that went out is never sent again ---------------------------------------------------


@pytest.mark.parametrize("pooled", [False, True], ids=["new connection", "pooled connection"])
@pytest.mark.parametrize("how", ["close", "reset"])
async def test_a_post_read_then_dropped_is_received_once_and_is_a_peer_drop(serve, hop, pooled, how):
    def read_step_then_drop(peer: Peer) -> None:
        while (body := peer.read_request()) is not None:
            if b'"a":2' in body:
                return peer.reset() if how == "reset" else None  # read, then no answer
            peer.send(answer())

    server = serve(read_step_then_drop)
    if pooled:
        await hop.post_ok(server.url, "/seed", {"a": 1})
    with pytest.raises(TransportPeerDrop) as err:
        await hop.post(server.url, "/step", {"a": 2}, server="env")
    steps = [line for _, line, body in server.requests if body == b'{"a":2}']
    assert steps == [b"POST /step HTTP/1.1"] and server.connections == 1
    assert isinstance(err.value, ServerError) and err.value.status == 0
    assert err.value.failure.kind == "transport_peer_drop" and err.value.failure.server == "env"


@pytest.mark.parametrize("framing", ["sized", "chunked"])
async def test_a_truncated_answer_is_a_peer_drop_sent_once(serve, hop, framing):
    def truncate(peer: Peer) -> None:
        peer.read_request()
        if framing == "sized":
            peer.send(b'HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{"cut')
        else:
            peer.send(b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n{"cut')

    server = serve(truncate)
    with pytest.raises(TransportPeerDrop):
        await hop.post(server.url, "/x", {})
    assert len(server.requests) == 1


@pytest.mark.parametrize(
    "garbage",
    [
        b"NOT HTTP AT ALL\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: nope\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX-Huge: " + b"a" * (2 * 2**20) + b"\r\n\r\n",  # a huge header
        b"HTTP/1.1 200 OK\r\n" + b"X-Many: 1\r\n" * 20000 + b"\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
    ],
    ids=["not http", "bad length", "huge header", "many headers", "upgrade"],
)
async def test_bytes_that_are_no_answer_are_a_peer_drop_sent_once(serve, hop, garbage):
    def misbehave(peer: Peer) -> None:
        peer.read_request()
        with contextlib.suppress(OSError):  # the client may hang up mid-way: it has seen enough
            peer.send(garbage)
        peer.read_request()  # until the client closes

    server = serve(misbehave)
    with pytest.raises(TransportPeerDrop):
        await asyncio.wait_for(hop.post(server.url, "/x", {}, timeout=WAIT_S), WAIT_S)
    await server.wait_for(lambda: server.closed_connections == 1)  # the client closed the connection
    assert len(server.requests) == 1


async def test_a_silent_server_times_out_once(serve, hop):
    def silent(peer: Peer) -> None:
        peer.read_request()
        peer.read_request()  # no answer; returns when the client hangs up

    server = serve(silent)
    with pytest.raises(TransportTimeout) as err:
        await hop.post(server.url, "/x", {}, server="staller", timeout=0.3)
    await server.wait_for(lambda: server.closed_connections == 1)
    assert err.value.failure.kind == "transport_timeout" and len(server.requests) == 1


# -- never reached: unreachable, and refused is tried again ----------------------------------------


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_a_refused_connection_is_unreachable_and_typed(hop):
    url = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(TransportUnreachable) as err:
        await hop.post(url, "/run", {}, server="agent")
    assert err.value.failure.kind == "transport_unreachable" and err.value.status == 0
    assert run_failure(err.value, "agent").stage == "admission"


async def test_a_refused_connection_is_tried_again_and_reaches_a_server_that_came_up(hop):
    """The resend loop with the real transport: the port refuses, then listens (opened between tries)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    send = hop.transport.send
    failures: list[BaseException] = []
    served: list[bytes] = []

    async def send_then_listen(*args, **kwargs):
        try:
            return await send(*args, **kwargs)
        except Exception as exc:
            failures.append(exc)
            sock.listen()
            threading.Thread(target=_answer_once, args=(sock, served), daemon=True).start()
            raise

    hop.transport.send = send_then_listen  # the real transport's send, the port opened after its first try
    try:
        reply = await hop.post(url, "/x", {"i": 1})
    finally:
        sock.close()
    assert reply.body == b'{"ok": true}' and served == [b'{"i":1}'] and len(failures) == 1
    assert client._resend_delay(failures[0], 1) is not None  # refused: provably never sent


def _answer_once(listener: socket.socket, served: list[bytes]) -> None:
    conn, _ = listener.accept()
    with conn:
        peer = Peer(conn, 1)
        served.append(peer.read_request())
        peer.send(answer(extra=b"Connection: close\r\n"))


# -- the errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [TransportUnreachable, TransportPeerDrop, TransportTimeout])
def test_transport_errors_survive_a_pickle_round_trip(cls):
    error = cls("env", "POST /step", "the cause", "the hint")
    error.add_note("a note")
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is cls and isinstance(again, TransportError) and isinstance(again, ServerError)
    assert (again.server, again.route, again.status, again.cause, again.hint) == (
        "env",
        "POST /step",
        0,
        "the cause",
        "the hint",
    )
    assert again.failure == error.failure and again.failure.kind == cls.kind
    assert str(again) == str(error) and again.__notes__ == ["a note"]
