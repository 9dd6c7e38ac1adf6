"""In-process dispatch: a request made on a Lab's loop to one of its servers goes into its ASGI app with the
scope uvicorn would build, no socket; cancelling the caller cancels the handler (docs/transport.md)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gymlab._http.wire import MAX_ANSWER, Answer, AnswerTooLarge

log = logging.getLogger("gymlab.server")


class Bound:
    """A server bound to ``host``:``port``, which fix its ``url``."""

    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"


@dataclass(eq=False)
class LocalApp(Bound):
    """One server reachable in-process: its ASGI app, the loop it runs on and its address."""

    app: Any
    loop: asyncio.AbstractEventLoop
    host: str
    port: int
    name: str = ""
    state: Callable[[], dict[str, Any]] = field(default=dict)  # the app's lifespan state, as uvicorn passes it

    def __post_init__(self) -> None:
        self.host_header = f"{self.host}:{self.port}".encode()  # the Host header of every request to it


class AppDropped(ConnectionError):
    """The app raised after it had started answering: what a client sees as a dropped connection."""


class Registry:
    """The servers reachable in-process, by URL: a Lab's own, handed to its ``Client`` (never shared)."""

    def __init__(self) -> None:
        self._apps: dict[str, LocalApp] = {}

    def register(self, entry: LocalApp) -> None:
        """Answer requests to ``entry.url`` made on ``entry.loop`` in-process from now on."""
        self._apps[entry.url] = entry

    def unregister(self, entry: LocalApp) -> None:
        """Stop answering ``entry.url`` in-process (only if ``entry`` still holds it)."""
        if self._apps.get(entry.url) is entry:
            del self._apps[entry.url]

    def lookup(self, url: str) -> LocalApp | None:
        """The in-process server at ``url``, if there is one on the running loop (a client's request runs on one)."""
        entry = self._apps.get(url)
        return entry if entry is not None and entry.loop is asyncio.get_running_loop() else None


async def call(entry: LocalApp, method: str, path: str, body: bytes, headers: dict[str, str]) -> Answer:
    """One request through ``entry.app``: ``(status, headers, body)``, as uvicorn would deliver it."""
    raw_path, _, query = path.partition("?")
    sent = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": raw_path,
        "raw_path": raw_path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [
            (b"host", entry.host_header),
            (b"content-length", str(len(body)).encode()),
            *sent,
        ],
        "client": ("127.0.0.1", 0),
        "server": (entry.host, entry.port),
        "state": dict(entry.state()),
    }
    where = f"{entry.name or entry.url}: {method} {raw_path}"
    try:
        return await exchange(entry.app, scope, body, where)
    except (AnswerTooLarge, AppDropped):
        raise
    except Exception as exc:  # uvicorn's own answer to an app that raised before starting one
        log.error("%s raised outside the app's error handling", where, exc_info=exc)
        return 500, [(b"content-type", b"text/plain; charset=utf-8")], b"Internal Server Error"


async def exchange(app: Any, scope: dict[str, Any], body: bytes, where: str, limit: float = MAX_ANSWER) -> Answer:
    """``(status, headers, body)`` of ``scope`` and ``body`` through the ASGI ``app``, as uvicorn delivers it;
    an exception before the answer starts is raised as is. ``where``: server and route, for errors."""
    request = [{"type": "http.request", "body": body, "more_body": False}]  # received once, then a disconnect
    finished = asyncio.Event()
    status: int | None = None
    answer_headers: list[tuple[bytes, bytes]] = []
    chunks: list[bytes] = []
    size = 0

    async def receive() -> dict[str, Any]:
        if request:
            return request.pop()
        await finished.wait()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status, size
        if message["type"] == "http.response.start":
            status = message["status"]
            answer_headers.extend(message.get("headers", ()))
        elif message["type"] == "http.response.body":
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:  # raised into the app, which stops; the caller gets the typed failure below
                chunks.clear()
                raise AnswerTooLarge(f"the answer's body is over {MAX_ANSWER} bytes (GYMLAB_MAX_ANSWER_MIB)")
            chunks.append(chunk)
            if not message.get("more_body", False):
                finished.set()

    try:
        await app(scope, receive, send)
    except Exception as exc:
        if size > limit:
            raise AnswerTooLarge(
                f"{where}: the answer's body is over {MAX_ANSWER} bytes (GYMLAB_MAX_ANSWER_MIB)"
            ) from None
        if status is not None:
            raise AppDropped(f"{where} failed mid-answer: {exc!r}") from exc
        raise
    finally:
        finished.set()
    if status is None:
        raise AppDropped(f"{where} returned without answering")
    return status, answer_headers, b"".join(chunks)
