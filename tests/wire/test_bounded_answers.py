"""Every client path stops an answer at the hop's cap, as a typed failure: an endless body over the
socket (aiohttp), in-process and through the OpenAI proxy's upstream (a real uvicorn server on 127.0.0.1 that
never stops streaming), with the process's peak RSS growing less than twice the cap; and the raw
protocol abuses that passed: a 100 KB ``Set-Cookie`` in one read, status 0, an interim-answer flood,
``Set-Cookie`` values long enough to stall the standard library's parser.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest

from gymlab._http.client import Client, Cookies
from gymlab._http.cookies import MAX_SET_COOKIE, answer_cookie_pairs
from gymlab._http.wire import MAX_ANSWER
from gymlab.errors import TransportPeerDrop
from tests.wire.test_transport_conformance import RawServer

ENDLESS = r"""
import asyncio, json, resource, sys
from fastapi.responses import StreamingResponse
from gymlab import Lab
from gymlab._http.client import Client
from gymlab._http.wire import MAX_ANSWER
from gymlab._sync import run_sync
from gymlab.errors import ServerError
from gymlab.models.openai import OpenAIModel
from gymlab.server import BaseServer


class Endless(BaseServer):
    name: str = "endless"

    def setup_webserver(self):
        app = super().setup_webserver()

        async def endless():
            async def body():
                while True:  # a new MiB each time, as a runaway generator makes; the loop turns between
                    # them (uvicorn's send to a gone client returns at once: without a turn, no task ever
                    # sees the hang-up, and this server's loop spins here)
                    yield b"x" * 2**20
                    await asyncio.sleep(0)

            return StreamingResponse(body(), media_type="application/json")

        app.post("/endless")(endless)
        app.post("/v1/responses")(endless)
        return app


def peak_mib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def kind_of(call):
    try:
        call()
    except ServerError as exc:
        return exc.failure.kind if exc.failure else f"no failure: {exc}"
    return "answered"


with Lab() as lab:
    url = lab.serve(Endless).url
    proxy = lab.serve(OpenAIModel, base_url=url + "/v1", max_retries=0).url
    path = sys.argv[1]
    base = peak_mib()
    if path == "socket":
        async def hop():
            async with Client() as own:  # a registry of its own: over the socket
                await own.post(url, "/endless", {}, timeout=60)
        kind = kind_of(lambda: asyncio.run(hop()))
    elif path == "in-process":
        kind = kind_of(lambda: run_sync(lab.client.post(url, "/endless", {}, timeout=60)))
    else:
        kind = kind_of(lambda: run_sync(lab.client.ask_model(proxy, {"input": "hi"}, timeout=60)))
    print(json.dumps({"kind": kind, "growth_mib": peak_mib() - base, "cap_mib": MAX_ANSWER / 2**20}))
"""


def test_endless_answers_stop_at_the_cap_on_every_path():
    """Each path in a process of its own (the peak RSS is a process's), the four at once."""
    paths = ("socket", "in-process", "proxy")
    runs = {
        path: subprocess.Popen([sys.executable, "-c", ENDLESS, path], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        for path in paths
    }
    for path, run in runs.items():
        out, err = run.communicate(timeout=120)
        assert run.returncode == 0, err.decode()[-3000:]
        result = json.loads(out.decode().strip().splitlines()[-1])
        assert result["kind"] == "response_too_large", (path, result)
        assert result["growth_mib"] < 2 * result["cap_mib"], (path, result)


def _post(url: str, cookies: Cookies | None = None, timeout: float = 30):
    async def go():
        async with Client() as own:
            return await own.post(url, "/x", {}, cookies=cookies, timeout=timeout)

    return asyncio.run(go())


def _answering(raw: bytes) -> RawServer:
    def handler(peer):
        peer.read_request()
        peer.send(raw)

    return RawServer(handler)


def test_a_head_over_the_cap_in_one_read_is_refused():
    cookie = b"Set-Cookie: a=" + b"x" * 100_000 + b"\r\n"
    server = _answering(b"HTTP/1.1 200 OK\r\n" + cookie + b"Content-Length: 2\r\n\r\n{}")
    with pytest.raises(TransportPeerDrop):
        _post(server.url)


def test_status_zero_is_no_answer():
    server = _answering(b"HTTP/1.1 000 OK\r\nContent-Length: 2\r\n\r\n{}")
    with pytest.raises(TransportPeerDrop):
        _post(server.url)


def test_an_interim_answer_flood_is_cut():
    def handler(peer):
        peer.read_request()
        while True:  # until the client hangs up
            peer.send(b"HTTP/1.1 100 Continue\r\n\r\n" * 64)

    with pytest.raises(TransportPeerDrop, match="interim"):
        _post(RawServer(handler).url)


def test_long_quoted_set_cookie_is_dropped_unread():
    quoted = b'Set-Cookie: big="' + b'\\"' * 3_000 + b'"\r\n'  # 6 KB: under aiohttp's line limit, over one cookie's
    server = _answering(b"HTTP/1.1 200 OK\r\n" + quoted + b"Set-Cookie: s=1\r\nContent-Length: 2\r\n\r\n{}")
    jar = Cookies()
    assert _post(server.url, jar).status == 200
    assert jar.by_url == {server.url: {"s": "1"}}  # the long value is dropped unparsed; the next one is read


def test_many_long_set_cookies_are_read_within_a_budget():
    long = [b"c%d=" % i + b"v" * 8000 for i in range(100)]  # each under aiohttp's 8190-byte line
    server = _answering(
        b"HTTP/1.1 200 OK\r\n" + b"".join(b"Set-Cookie: " + v + b"\r\n" for v in long) + b"Content-Length: 2\r\n\r\n{}"
    )
    jar = Cookies()
    assert _post(server.url, jar).status == 200
    assert jar.by_url == {}
    small = [b"a=1", b"b=" + b"2" * (MAX_SET_COOKIE - 2), b"c=3", b"d=" + b"4" * MAX_SET_COOKIE, b"e=5"]
    assert answer_cookie_pairs(small) == [("a", "1"), ("b", "2" * (MAX_SET_COOKIE - 2)), ("c", "3")]


def test_the_cap_is_one_setting():
    assert 10 * 2**20 <= MAX_ANSWER <= 100 * 2**20  # tens of MiB unless GYMLAB_MAX_ANSWER_MIB says otherwise
    code = "import gymlab._http.wire as h; print(h.MAX_ANSWER)"
    for value, expected in (("8", str(8 * 2**20)), ("lots", "GYMLAB_MAX_ANSWER_MIB='lots': give the largest")):
        env = {**os.environ, "GYMLAB_MAX_ANSWER_MIB": value}
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
        assert expected in done.stdout + done.stderr
