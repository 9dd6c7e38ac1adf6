"""The cookie codec (``gymlab._http.cookies``): what real clients send back, and hostile cookie headers.

Every client here keeps its cookies as it always does: aiohttp's ``CookieJar`` (``unsafe=True`` for
an IP host; it sends a value holding ``=`` in double quotes), httpx's and requests' jars, and curl
with a cookie file (``-c`` / ``-b``). A server on 127.0.0.1 sets a session-shaped cookie, a plain
one and a quoted one, and echoes the ``Cookie`` header each client sends back; the codec must read
the values that were set. Then each client runs a counter session against a real gymlab server.
Hostile cookie headers get a 4xx or no session, never a 5xx, from one worker and from two (the
worker router reads the cookie first).
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from http.cookies import SimpleCookie

import aiohttp
import httpx
import pytest

from gymlab._http.client import Cookies
from gymlab._http.cookies import (
    _plain_pair,
    cookie_header,
    request_cookie,
    request_cookies,
    scope_cookie,
    set_cookie,
    set_cookie_attributes,
    set_cookie_pairs,
)
from gymlab._runtime.serve import ThreadedServer
from gymlab.examples import environment_dir, load_environment
from gymlab.testing.workers import serve_entrypoint

TIMEOUT = 60.0
#: A signed session value as a gymlab server writes it: base64 JSON (with ``=`` padding), stamp, signature.
SESSION = "eyJzZXNzaW9uX2lkIjogImFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhYWFhIn0=.axF-nQ.gSL_2ORxk0F6NyFlxBKAuagBSy8"
SET = [
    set_cookie("sess", SESSION, set_cookie_attributes("/", 3600, "httponly; samesite=lax")),
    b"plain=abc123; Path=/",
    b'q="quoted"; Path=/; HttpOnly',
]
EXPECTED = {"sess": SESSION, "plain": "abc123", "q": "quoted"}


# -- the codec itself -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (f"sess={SESSION}", {"sess": SESSION}),
        (f'sess="{SESSION}"', {"sess": SESSION}),  # aiohttp's form
        (f'a=1; sess="{SESSION}"; b=2', {"a": "1", "sess": SESSION, "b": "2"}),
        (f'  a = 1 ;sess =  "{SESSION}"  ;;b=2;', {"a": "1", "sess": SESSION, "b": "2"}),  # odd spacing
        ("a=first; a=second", {"a": "first"}),  # a repeated name: the first wins
        ("novalue; =x; a=", {"a": ""}),  # parts without a name or "=" are skipped
        ('a="', {"a": '"'}),  # a lone quote is not a quoted value
        ('a=""', {"a": ""}),
        ("", {}),
    ],
)
def test_request_cookie_headers(header, expected):
    assert request_cookies(header) == expected
    for name, value in expected.items():
        assert request_cookie(header, name) == value
        assert scope_cookie([(b"host", b"x"), (b"cookie", header.encode("latin-1"))], name) == value
    assert request_cookie(header, "absent") is None


def test_the_first_cookie_header_naming_a_cookie_wins():
    headers = [(b"cookie", b"other=1"), (b"cookie", b"sess=first"), (b"cookie", b"sess=second")]
    assert scope_cookie(headers, "sess") == "first"
    assert scope_cookie([], "sess") is None


def test_writing_then_reading_gives_the_same_cookies():
    cookies = {"sess": SESSION, "plain": "abc123"}
    assert request_cookies(cookie_header(cookies)) == cookies
    assert cookie_header({}) is None


@pytest.mark.parametrize(
    "value",
    [
        *(v.decode() for v in SET),
        f"gymlab_counter={SESSION}; path=/; Max-Age=1209600; httponly; samesite=lax",
        "gymlab_counter=null; path=/; expires=Thu, 01 Jan 1970 00:00:00 GMT; httponly; samesite=lax",
        f'sess="{SESSION}"; Path=/',
        "session=; Path=/; Secure; HttpOnly",
        "a=b=c",
        'quoted="a;b"; path=/',  # quoted: the general parser
        "a=1; b=2",  # not an attribute: the general parser reads two pairs
        "path=/x",  # a cookie named like an attribute
        "odd name=1; path=/",
        "a=b c; Path=/",
        'a="x\\"y"; Path=/',
        "a=1; Unknown=2; Secure",
        "",
    ],
)
def test_set_cookie_reads_as_the_standard_parser_does(value):
    standard = [(k, m.value) for k, m in SimpleCookie(value).items()]
    assert set_cookie_pairs(value) == standard
    jar = Cookies()  # an agent keeps what it reads
    jar.update_from_values("http://s", [value.encode("latin-1")])
    assert jar.by_url.get("http://s", {}) == dict(standard)


def test_a_servers_session_cookie_takes_the_plain_path():
    value = f"gymlab_counter={SESSION}; path=/; Max-Age=86400; httponly; samesite=lax"
    assert _plain_pair(value) == ("gymlab_counter", SESSION)
    assert _plain_pair('quoted="a;b"; path=/') is None


def test_an_agent_reads_the_cookie_header_it_wrote():
    jar = Cookies.from_header("http://s", f'sess="{SESSION}"; plain=abc123')
    assert jar.by_url == {"http://s": {"sess": SESSION, "plain": "abc123"}}
    assert Cookies.from_header("http://s", jar.header("http://s")).by_url == jar.by_url
    assert Cookies.from_header("http://s", None).by_url == {}


def test_a_set_cookie_the_standard_parser_refuses_is_dropped():
    assert set_cookie_pairs("a<b>=1") == []


# -- what real clients send back --------------------------------------------------------------------


async def _echo_app(scope, receive, send):
    """Sets ``SET`` on /set; answers /echo with the raw ``Cookie`` header and the codec's reading of it."""
    if scope["type"] == "lifespan":
        while True:
            message = await receive()
            await send({"type": message["type"] + ".complete"})
            if message["type"] == "lifespan.shutdown":
                return
    headers = [(b"content-type", b"application/json")]
    raw = [v.decode("latin-1") for k, v in scope["headers"] if k == b"cookie"]
    body = {"headers": raw, "cookies": request_cookies("; ".join(raw))}
    if scope["path"] == "/set":
        headers += [(b"set-cookie", value) for value in SET]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": json.dumps(body).encode()})


@pytest.fixture(scope="module")
def echo():
    server = ThreadedServer(_echo_app, name="cookie-echo").start()
    try:
        yield server.url
    finally:
        server.stop()


def _aiohttp(url: str) -> dict:
    async def go():
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            await (await http.get(f"{url}/set")).read()
            async with http.get(f"{url}/echo") as reply:
                return await reply.json()

    return asyncio.run(go())


def _httpx(url: str) -> dict:
    with httpx.Client(timeout=TIMEOUT) as http:
        http.get(f"{url}/set")
        return http.get(f"{url}/echo").json()


def _requests(url: str) -> dict:
    requests = pytest.importorskip("requests", reason="requests is not installed in this environment")
    with requests.Session() as http:
        http.get(f"{url}/set", timeout=TIMEOUT)
        return http.get(f"{url}/echo", timeout=TIMEOUT).json()


def _curl(url: str, tmp_path) -> dict:
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed on this machine")
    jar = tmp_path / "cookies.txt"
    for path in ("/set", "/echo"):
        done = subprocess.run(
            [curl, "-sS", "--max-time", "30", "-b", str(jar), "-c", str(jar), url + path],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


CLIENTS = {"aiohttp": _aiohttp, "httpx": _httpx, "requests": _requests, "curl": _curl}


@pytest.mark.parametrize("client", CLIENTS)
def test_the_codec_reads_what_each_client_sends_back(echo, client, tmp_path):
    sent = CLIENTS[client](echo, tmp_path) if client == "curl" else CLIENTS[client](echo)
    assert len(sent["headers"]) == 1, sent  # one Cookie header, several pairs
    assert sent["cookies"] == EXPECTED, sent["headers"]
    if client == "aiohttp":  # the form that lost NeMo Gym's sessions: a value holding "=" comes back quoted
        assert f'sess="{SESSION}"' in sent["headers"][0]


# -- each client keeps a session on a real gymlab server ------------------------------------------------


def _counter_session_aiohttp(url: str) -> list[int]:
    async def go():
        async with aiohttp.ClientSession(cookie_jar=aiohttp.CookieJar(unsafe=True)) as http:
            await (await http.post(f"{url}/seed_session", json={"initial_count": 5})).read()
            return [(await (await http.post(f"{url}/increment", json={"by": 1})).json())["count"] for _ in range(2)]

    return asyncio.run(go())


def _counter_session_httpx(url: str) -> list[int]:
    with httpx.Client(timeout=TIMEOUT) as http:
        http.post(f"{url}/seed_session", json={"initial_count": 5})
        return [http.post(f"{url}/increment", json={"by": 1}).json()["count"] for _ in range(2)]


def _counter_session_requests(url: str) -> list[int]:
    requests = pytest.importorskip("requests", reason="requests is not installed in this environment")
    with requests.Session() as http:
        http.post(f"{url}/seed_session", json={"initial_count": 5}, timeout=TIMEOUT)
        return [http.post(f"{url}/increment", json={"by": 1}, timeout=TIMEOUT).json()["count"] for _ in range(2)]


def _counter_session_curl(url: str, tmp_path) -> list[int]:
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed on this machine")
    jar, counts = tmp_path / "cookies.txt", []
    for path, body in [("/seed_session", {"initial_count": 5}), *[("/increment", {"by": 1})] * 2]:
        done = subprocess.run(
            [curl, "-sS", "--max-time", "30", "-b", str(jar), "-c", str(jar), "-H", "content-type: application/json"]
            + ["-d", json.dumps(body), url + path],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert done.returncode == 0, done.stderr
        counts.append(json.loads(done.stdout).get("count"))
    return counts[1:]


SESSIONS = {
    "aiohttp": _counter_session_aiohttp,
    "httpx": _counter_session_httpx,
    "requests": _counter_session_requests,
    "curl": _counter_session_curl,
}


@pytest.mark.parametrize("client", SESSIONS)
def test_each_client_keeps_a_counter_session(lab, client, tmp_path):
    url = lab.serve(load_environment("counter").CounterServer).url
    run = SESSIONS[client]
    assert (run(url, tmp_path) if client == "curl" else run(url)) == [6, 7]


# -- hostile cookie headers: a 4xx or no session, never a 5xx -------------------------------------------


def _hostile(name: str, value: str) -> dict[str, bytes]:
    forged = "eyJzZXNzaW9uX2lkIjogImZvcmdlZCJ9"  # base64 JSON naming a session, unsigned
    return {
        "huge (1 MB)": f"{name}={'A' * 1_000_000}".encode(),
        "thousands of pairs, the session's last": (
            "; ".join(f"c{i}=v{i}" for i in range(5000)) + f"; {name}={value}"
        ).encode(),
        "garbage bytes": bytes(range(128, 256)) + f"; {name}=".encode() + bytes(range(128, 256)),
        "unsigned": f"{name}={forged}".encode(),
        "forged signature": f"{name}={value[:-4]}AAAA".encode(),
        "a forged one first": f"{name}={forged}.x.y; {name}={value}".encode(),
        "quoted with escapes": f'{name}="{value[:20]}\\"\\012{value[20:]}"'.encode(),
        "empty value": f"{name}=".encode(),
        "only separators": b";;;; ; ;=;=",
    }


#: Which hostile headers still carry the real session (it is named once, or first).
KEEPS_SESSION = {"thousands of pairs, the session's last"}


def _hostile_statuses(url: str) -> dict[str, tuple[int, int | None]]:
    """Seed a counter, then send /increment with each hostile header: (status, count) per header.
    httpx sends a bytes header value as it is; no jar is involved."""
    seeded = httpx.post(f"{url}/seed_session", json={"initial_count": 0}, timeout=TIMEOUT)
    assert seeded.status_code == 200, seeded.text
    name, value = set_cookie_pairs(seeded.headers["set-cookie"])[0]
    quoted = f'{name}="{value}"'.encode()
    results = {}
    for label, header in {"quoted (aiohttp's form)": quoted, **_hostile(name, value)}.items():
        reply = httpx.post(f"{url}/increment", json={"by": 1}, headers={"cookie": header}, timeout=TIMEOUT)
        try:
            count = reply.json().get("count")
        except ValueError:
            count = None
        results[label] = (reply.status_code, count)
    return results


def _check_hostile(results: dict[str, tuple[int, int | None]]) -> None:
    assert all(status < 500 for status, _ in results.values()), results
    assert results["quoted (aiohttp's form)"] == (200, 1), results
    for label, (status, count) in results.items():
        if label in KEEPS_SESSION:
            assert status == 200 and count is not None, (label, results)
        elif label != "quoted (aiohttp's form)":
            assert 400 <= status < 500 and count is None, (label, results)  # no session: no counter (404)


def test_hostile_cookie_headers_with_one_worker(lab):
    url = lab.serve(load_environment("counter").CounterServer).url
    _check_hostile(_hostile_statuses(url))


def test_hostile_cookie_headers_with_two_workers():
    with serve_entrypoint(environment_dir("counter") / "app.py", workers=2) as served:
        _check_hostile(_hostile_statuses(served.url))
