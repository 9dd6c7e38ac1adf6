"""The ``Client`` of every hop: keep-alive, cookies, chunked answers, typed failures, its own registry.

Against real servers on 127.0.0.1: uvicorn for well-behaved answers, a raw asyncio server for the
misbehaving ones (it drops, stalls or answers garbage), so each failure is the real socket event.
"""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from gymlab._http.client import Client, Cookies
from gymlab._runtime.serve import ThreadedServer
from gymlab.errors import TransportPeerDrop, TransportTimeout, TransportUnreachable


async def _echo_app(scope, receive, send):
    """Answers every POST with its client port, the Cookie header it got and a cookie of its own;
    ``/chunked`` streams its answer in three parts (chunked transfer encoding)."""
    if scope["type"] == "lifespan":
        while (message := await receive())["type"] != "lifespan.shutdown":
            await send({"type": message["type"] + ".complete"})
        await send({"type": "lifespan.shutdown.complete"})
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    cookie = dict(scope["headers"]).get(b"cookie", b"").decode()
    port = scope["client"][1]
    answer = b'{"port": %d, "cookie": "%s", "got": %s}' % (port, cookie.encode(), body or b"null")
    if scope["path"] == "/chunked":
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
        for part in (answer[:5], answer[5:12], answer[12:]):
            await send({"type": "http.response.body", "body": part, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        return
    headers = [(b"content-type", b"application/json"), (b"set-cookie", b"jar=%d; path=/" % port)]
    await send(
        {"type": "http.response.start", "status": 201 if scope["path"] == "/created" else 200, "headers": headers}
    )
    await send({"type": "http.response.body", "body": answer})


@pytest.fixture
async def hop():
    """A client of the test's own (its registry empty: every hop over the socket), closed after."""
    async with Client() as own:
        yield own


@pytest.fixture
def echo():
    server = ThreadedServer(_echo_app, name="echo").start()
    yield server
    server.stop()


@contextlib.asynccontextmanager
async def raw_server(on_request):
    """A TCP server on 127.0.0.1 that reads one request's head and hands the writer to ``on_request``."""
    got, closed = asyncio.Event(), asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            got.set()
            await on_request(reader, writer)
        finally:
            writer.close()
            closed.set()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", got, closed
    finally:
        server.close()
        await server.wait_closed()


async def test_answers_reuse_one_keep_alive_connection(hop, echo):
    answers = [await hop.post_ok(echo.url, "/x", {"i": i}) for i in range(5)]
    assert [a["got"] for a in answers] == [{"i": i} for i in range(5)]
    assert len({a["port"] for a in answers}) == 1  # one connection carried all five


async def test_cookies_are_kept_per_rollout_and_status_and_chunked_body_come_through(hop, echo):
    jar = Cookies()
    first = await hop.post(echo.url, "/created", {"a": 1}, cookies=jar)
    assert first.status == 201
    second = (await hop.post(echo.url, "/x", {}, cookies=jar)).json()
    assert second["cookie"] == f"jar={first.json()['port']}"
    assert (await hop.post(echo.url, "/x", {})).json()["cookie"] == ""  # no jar, no cookie
    chunked = await hop.post_ok(echo.url, "/chunked", {"b": [1, 2]})
    assert chunked["got"] == {"b": [1, 2]}


async def test_a_restarted_server_on_the_same_port_is_reached_on_a_new_connection(hop):
    server = ThreadedServer(_echo_app, name="echo").start()
    port = server.port
    before = await hop.post_ok(server.url, "/x", {})
    server.stop()
    again = ThreadedServer(_echo_app, port=port, name="echo").start()
    try:
        after = await hop.post_ok(again.url, "/x", {})  # the pooled connection is dead: one retry, fresh
        assert after["port"] != before["port"]
    finally:
        again.stop()


async def test_unreachable_server_is_a_typed_transport_failure(hop):
    async with raw_server(lambda r, w: asyncio.sleep(0)) as (url, _, _):
        pass  # the port is free again once the server closed
    with pytest.raises(TransportUnreachable) as err:
        await hop.post(url, "/x", {}, server="gone")
    assert err.value.failure.kind == "transport_unreachable" and err.value.status == 0
    assert "gone" in str(err.value)


async def test_a_peer_that_drops_before_answering_is_a_peer_drop(hop):
    async def drop(reader, writer):
        writer.transport.abort()

    async with raw_server(drop) as (url, _, _):
        with pytest.raises(TransportPeerDrop) as err:
            await hop.post(url, "/x", {}, server="dropper")
    assert err.value.failure.kind == "transport_peer_drop"


async def test_garbage_bytes_are_a_peer_drop_not_an_answer(hop):
    async def garbage(reader, writer):
        writer.write(b"NOT HTTP AT ALL\r\n\r\n")
        await writer.drain()
        await reader.read()  # until the client closes

    async with raw_server(garbage) as (url, _, closed):
        with pytest.raises(TransportPeerDrop) as err:
            await hop.post(url, "/x", {}, server="garbler")
        await asyncio.wait_for(closed.wait(), 30)  # the client closed the connection it gave up on
    assert err.value.failure.kind == "transport_peer_drop"


async def test_a_silent_server_times_out_and_its_connection_is_closed(hop):
    async def stall(reader, writer):
        await reader.read()  # never answers; returns when the client hangs up

    async with raw_server(stall) as (url, _, closed):
        with pytest.raises(TransportTimeout) as err:
            await hop.post(url, "/x", {}, server="staller", timeout=0.3)
        await asyncio.wait_for(closed.wait(), 30)  # the server saw the hang-up
    assert err.value.failure.kind == "transport_timeout"


async def test_a_cancelled_call_closes_its_connection(hop):
    async def stall(reader, writer):
        await reader.read()

    async with raw_server(stall) as (url, got, closed):
        task = asyncio.ensure_future(hop.post(url, "/x", {}))
        await asyncio.wait_for(got.wait(), 30)  # the request is out
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(closed.wait(), 30)


async def test_line_breaks_never_reach_the_request_head(hop, echo):
    for url in (echo.url, "http://127.0.0.1:9"):  # over the socket, and into a registry's app
        with pytest.raises(ValueError, match="line break"):
            await hop.post(url, "/x", {}, headers={"Cookie": "a=1\r\nX-Evil: 1"})
    smuggled = await hop.post_ok(echo.url, "/x HTTP/1.1\r\nCookie: evil=1", {})
    assert smuggled["cookie"] == ""  # the path is escaped: no header of its own
