"""``Client``: the in-process registry is the client's own (a Lab's), and a hostile error body is still
a ``ServerError``."""

from __future__ import annotations

import asyncio
import socket

import pytest

from gymlab._http import client, inproc
from gymlab.errors import ServerError, TransportUnreachable


async def _app(scope, receive, send):
    """Answers every POST with the body it got."""
    body = (await receive())["body"]
    await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"application/json")]})
    await send({"type": "http.response.body", "body": b'{"in_process": %s}' % body})


@pytest.fixture
async def lab_registry():
    """A registry holding one app, at an address where no socket listens."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    registry = inproc.Registry()
    entry = inproc.LocalApp(_app, asyncio.get_running_loop(), "127.0.0.1", port, name="own")
    registry.register(entry)
    yield registry, entry.url
    registry.unregister(entry)
    assert registry.lookup(entry.url) is None


async def test_a_clients_registry_is_its_own(lab_registry):
    registry, url = lab_registry
    own, other = client.Client(registry), client.Client()
    assert await own.post_ok(url, "/x", {"a": 1}) == {"in_process": {"a": 1}}
    with pytest.raises(TransportUnreachable):  # another client goes to the socket
        await other.post_ok(url, "/x", {"a": 1})
    await other.close()


async def test_an_error_body_nested_past_the_parsers_depth_is_a_server_error():
    """A hostile server's error body nested too deeply to parse is still a ``ServerError`` naming the
    status and the raw text, never a ``RecursionError`` out of the client."""
    nested = b"[" * 100_000 + b"]" * 100_000

    async def deep_error(scope, receive, send):
        await receive()
        await send({"type": "http.response.start", "status": 500, "headers": [(b"content-type", b"application/json")]})
        await send({"type": "http.response.body", "body": nested})

    registry = inproc.Registry()
    entry = inproc.LocalApp(deep_error, asyncio.get_running_loop(), "127.0.0.1", 9, name="deep")
    registry.register(entry)
    with pytest.raises(ServerError) as raised:
        await client.Client(registry).post_ok(entry.url, "/x", {})
    assert raised.value.status == 500 and raised.value.cause == nested.decode()[:500] and raised.value.failure is None
