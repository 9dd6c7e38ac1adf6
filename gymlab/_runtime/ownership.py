"""Session ownership routing: with several workers, each request runs in the worker holding its session.

One rule, for every request whose handler can see the session: find the request's session ID (the
signed cookie's ``SESSION_ID_KEY``; for an episode seed or close, the body's ``resources_session_id``
or ``agent_session_id``; both naming different sessions is a 409), look it up in the ownership
table, and forward the request to the owning worker; handle it here when this worker owns it or
nobody does (and then own it). A route whose handler takes no ``Request`` cannot read the session:
it runs wherever it lands and takes no ownership (health, ``/aggregate_metrics``, stateless tools).
Seeds and the routes in ``checkpoint_session_starts`` always take ownership.

Ownership is open from a successful seed (``/seed_session``, ``/reset`` or a route in
``checkpoint_session_starts``) until the close (``/close_session``, Gymnasium's ``/close``), the
verify (unless its body says ``close_follows``), a ``/step`` answered terminated or truncated, or a
route in ``checkpoint_session_ended``. A closed or never-opened session's ownership expires
``session_close_retry_window_seconds`` after its last request, so a retried close or a delayed seed
still reaches the worker that saw it, and a fence built with the same window expires no later. A
session whose owner is no longer running (crashed, replaced by uvicorn) answers 410: its state is
gone, and running against an empty one would grade garbage.

The table is a SQLite file in WAL mode in the launcher's private directory (docs/architecture.md has
its cost): readers never block, writes happen only when ownership changes, and a killed writer's lock
is released by the kernel. Rows name the worker as ``pid-token``, so a reused pid is never the old owner.

Forwarding is one length-prefixed frame each way over the owner's private Unix socket
(``w<pid>-<token>.sock``, connections pooled per owner); the owner replays the request into its app
below this middleware. ``make bench`` measures it (docs: the figures).
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import struct
import time
from base64 import b64decode
from typing import Any

from gymlab._runtime.bodies import request_body
from gymlab._runtime.routes import (  # noqa: F401
    BODY_ID_KEYS,
    END,
    END_ROUTES,
    NONE,
    START,
    START_ROUTES,
    STEP,
    STEP_ROUTES,
    USE,
    VERIFY,
    VERIFY_ROUTES,
    RouteKinds,
    uses_session,
)
from gymlab.cookies import scope_cookie
from gymlab.errors import error_body
from gymlab.protocol.resources import SESSION_ID_KEY
from gymlab.protocol.sessions import MAX_SESSION_ID_LENGTH

#: Every answer a worker gives to a session request names it (``x-gymlab-worker: <pid>``).
WORKER_HEADER = b"x-gymlab-worker"
#: A forwarded answer also names the worker that received the request.
FORWARDED_HEADER = b"x-gymlab-forwarded-by"
_DONE = (b'"terminated":true', b'"truncated":true')
TOUCH_EVERY_S = 1.0
TABLE = "owners.sqlite"

_FRAME = struct.Struct("!II")


def create_table(state_dir: str) -> None:
    """Create the ownership table (the launcher does this once, before any worker starts)."""
    import sqlite3

    db = sqlite3.connect(os.path.join(state_dir, TABLE), isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute(
        "CREATE TABLE IF NOT EXISTS owners (sid TEXT PRIMARY KEY, worker TEXT NOT NULL, "
        "open INTEGER NOT NULL, seen REAL NOT NULL) WITHOUT ROWID"
    )
    db.close()


def install(app, server, ctx: dict[str, Any] | None, kinds: RouteKinds | None = None) -> None:
    """Add the routing middleware outermost when this process is one of several workers
    (``ctx``: ``workers.worker_context()``, None outside a worker)."""
    if ctx is None or not getattr(type(server), "routes_sessions_to_owner", True):
        return
    app.add_middleware(SessionOwnershipMiddleware, server=server, fastapi_app=app, state_dir=ctx["dir"], kinds=kinds)


def worker_alive(worker: str) -> bool:
    try:
        os.kill(int(worker.split("-", 1)[0]), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError):
        return True
    return True


class OwnershipTable:
    """Rows ``sid -> (worker, open, seen)`` shared by the workers of one server."""

    def __init__(self, path: str, window: float):
        import sqlite3

        self.db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=10)
        self.db.execute("PRAGMA synchronous=OFF")  # the table dies with the server: no fsync needed
        self.window = window
        self._writes = 0

    def get(self, sid: str) -> tuple[str, int, float] | None:
        return self.db.execute("SELECT worker, open, seen FROM owners WHERE sid = ?", (sid,)).fetchone()

    def expired(self, row: tuple[str, int, float], now: float) -> bool:
        worker, open_, seen = row
        return seen < now - self.window and (not open_ or not worker_alive(worker))

    def claim(self, sid: str, worker: str, now: float) -> tuple[str, int, float]:
        """The session's owner, made ``worker`` when nobody (or an expired owner) holds it."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            row = self.get(sid)
            if row is None or self.expired(row, now):
                row = (worker, 0, now)
                self.db.execute("INSERT OR REPLACE INTO owners VALUES (?, ?, 0, ?)", (sid, worker, now))
        finally:
            self.db.execute("COMMIT")
        self._wrote(now)
        return row

    def record(self, sid: str, worker: str, open_: int, now: float) -> None:
        self.db.execute(
            "INSERT INTO owners VALUES (?, ?, ?, ?) ON CONFLICT(sid) DO UPDATE SET open = excluded.open, "
            "seen = excluded.seen WHERE owners.worker = excluded.worker",
            (sid, worker, open_, now),
        )
        self._wrote(now)

    def touch(self, sid: str, now: float) -> None:
        self.db.execute("UPDATE owners SET seen = ? WHERE sid = ?", (now, sid))

    def _wrote(self, now: float) -> None:
        self._writes += 1
        if self._writes % 1000 == 0:
            self.db.execute("DELETE FROM owners WHERE open = 0 AND seen < ?", (now - self.window,))


class SessionOwnershipMiddleware:
    """Outermost ASGI middleware of a worker: route each session request to its owning worker."""

    def __init__(self, app, server, fastapi_app, state_dir: str, kinds: RouteKinds | None = None):
        self.app, self.fastapi_app, self.name, self.dir = app, fastapi_app, server.name, state_dir
        self.kinds = kinds or RouteKinds(fastapi_app, server)
        self.window = float(getattr(server, "session_close_retry_window_seconds", 300.0))
        self.worker = f"{os.getpid()}-{secrets.token_hex(4)}"
        self._pid = str(os.getpid()).encode()
        self.table: OwnershipTable | None = None
        self._cookie: tuple[str, Any, int | None] | None = None
        self._sids: dict[str, str | None] = {}
        self._pool: dict[str, list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] = {}
        self._rpc: asyncio.base_events.Server | None = None
        self._rpc_lock: asyncio.Lock | None = None
        self._state: dict | None = None  # the worker's lifespan state, for the requests forwarded here

    # -- the rule ------------------------------------------------------------------------------

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        kind = self.kinds.kind(scope)
        if kind == NONE:
            return await self.app(scope, receive, send)
        if self._rpc is None:
            self._state = scope.get("state")
            await self._start()
        sid, body = self._cookie_sid(scope), None
        if kind not in (USE, STEP):
            body, receive = await request_body(scope, receive)
            if kind != VERIFY:
                body_sid = _body_sid(body)
                if sid and body_sid and sid != body_sid:
                    return await self._conflict(scope, send, sid, body_sid)
                sid = sid or body_sid
        if sid is None:  # a new session: its ID is made here, and recorded before the answer leaves
            return await self._local(scope, receive, send, kind, None, None, body)
        now = time.time()
        row = self.table.get(sid)
        if row is None or self.table.expired(row, now):
            row = self.table.claim(sid, self.worker, now)
        if row[0] == self.worker:
            return await self._local(scope, receive, send, kind, sid, row, body)
        if not worker_alive(row[0]):
            return await self._gone(scope, send, sid, row, now)
        if body is None:
            body, receive = await request_body(scope, receive)
        try:
            status, headers, answer = await self._forward(row, scope, body, kind, sid)
        except (OSError, asyncio.IncompleteReadError):
            return await self._gone(scope, send, sid, row, now)
        await send(
            {"type": "http.response.start", "status": status, "headers": [*headers, (FORWARDED_HEADER, self._pid)]}
        )
        await send({"type": "http.response.body", "body": answer})

    async def _local(self, scope, receive, send, kind, sid, row, body):
        async def settle_then_send(message):
            if message["type"] == "http.response.start":
                self._settle(scope, kind, sid, row, message["status"], body)
                message = {**message, "headers": [*message.get("headers", ()), (WORKER_HEADER, self._pid)]}
            elif kind == STEP and sid and any(done in message.get("body", b"") for done in _DONE):
                self.table.record(sid, self.worker, 0, time.time())
            await send(message)

        await self.app(scope, receive, settle_then_send)

    def _settle(self, scope, kind, sid, row, status, body) -> None:
        """Record what this answer does to the session's ownership (before the client sees it)."""
        sid = sid or (scope.get("session") or {}).get(SESSION_ID_KEY)
        if not sid:
            return
        now = time.time()
        if kind == START:
            self.table.record(sid, self.worker, int(200 <= status < 300), now)
        elif kind == END or (kind == VERIFY and not _close_follows(body)):
            self.table.record(sid, self.worker, 0, now)
        elif row is None:
            self.table.record(sid, self.worker, 0, now)
        elif not row[1] and now - row[2] > TOUCH_EVERY_S:
            self.table.touch(sid, now)

    # -- the session ID from the signed cookie -----------------------------------------------------

    def _cookie_sid(self, scope) -> str | None:
        name, signer, max_age = self._cookie or self._cookie_config()
        value = scope_cookie(scope["headers"], name)
        if not value:
            return None
        if value in self._sids:
            return self._sids[value]
        try:
            session = json.loads(b64decode(signer.unsign(value.encode(), max_age=max_age)))
            sid = session.get(SESSION_ID_KEY) if isinstance(session, dict) else None
        except Exception:  # a bad signature or garbage: the session middleware starts a fresh session
            sid = None
        if len(self._sids) > 65536:
            self._sids.clear()
        self._sids[value] = sid if isinstance(sid, str) else None
        return self._sids[value]

    def _cookie_config(self):
        import itsdangerous
        from starlette.middleware.sessions import SessionMiddleware

        for m in self.fastapi_app.user_middleware:
            if isinstance(m.cls, type) and issubclass(m.cls, SessionMiddleware):
                kw = m.kwargs
                self._cookie = (
                    kw.get("session_cookie", "session"),
                    itsdangerous.TimestampSigner(str(kw["secret_key"])),
                    kw.get("max_age", 14 * 24 * 60 * 60),
                )
                return self._cookie
        raise RuntimeError(f"{self.name}: session ownership routing needs the app's SessionMiddleware")

    # -- answers given here -----------------------------------------------------------------------

    async def _gone(self, scope, send, sid, row, now):
        if now - row[2] > TOUCH_EVERY_S:
            self.table.touch(sid, now)  # keeps answering 410 until the window passes in silence
        pid = row[0].split("-", 1)[0]
        route = f"{scope['method']} {scope['path']}"
        message = (
            f"session {sid} was held by worker {pid}, which is no longer running "
            "(it crashed or was replaced), so its state is gone"
        )
        await _json(
            send,
            410,
            error_body(
                self.name,
                route,
                message,
                error="SessionLost",
                session_id=sid,
                hint="this episode cannot continue; start a new one (a new session)",
            ),
        )

    async def _conflict(self, scope, send, cookie_sid, body_sid):
        route = f"{scope['method']} {scope['path']}"
        message = (
            f"the cookie names session {cookie_sid} but the body names {body_sid}; "
            "send the seed, its requests and its close with one session's cookie"
        )
        await _json(
            send, 409, error_body(self.name, route, message, error="ResourcesSessionConflictError", session_id=body_sid)
        )

    # -- forwarding over the workers' Unix sockets -------------------------------------------------

    def _socket_path(self, worker: str) -> str:
        return os.path.join(self.dir, f"w{worker}.sock")

    async def _start(self) -> None:
        if self._rpc_lock is None:
            self._rpc_lock = asyncio.Lock()
        async with self._rpc_lock:
            if self._rpc is None:
                self.table = OwnershipTable(os.path.join(self.dir, TABLE), self.window)
                self._rpc = await asyncio.start_unix_server(self._serve_forwarded, self._socket_path(self.worker))

    async def _forward(self, row, scope, body: bytes, kind: int, sid: str):
        path = self._socket_path(row[0])
        idle = self._pool.setdefault(path, [])
        reader, writer = idle.pop() if idle else await asyncio.open_unix_connection(path)
        meta = {
            "method": scope["method"],
            "path": scope["path"],
            "raw_path": (scope.get("raw_path") or b"").decode("latin-1"),
            "query_string": scope.get("query_string", b"").decode("latin-1"),
            "root_path": scope.get("root_path", ""),
            "headers": [[k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"]],
            "client": scope.get("client"),
            "server": scope.get("server"),
            "scheme": scope.get("scheme", "http"),
            "http_version": scope.get("http_version", "1.1"),
            "kind": kind,
            "sid": sid,
            "row": list(row),
        }
        head = json.dumps(meta).encode()
        try:
            writer.write(_FRAME.pack(len(head), len(body)) + head + body)
            await writer.drain()
            head_len, body_len = _FRAME.unpack(await reader.readexactly(_FRAME.size))
            answer = json.loads(await reader.readexactly(head_len))
            content = await reader.readexactly(body_len)
        except BaseException:  # a half-used connection is never pooled
            writer.close()
            raise
        if len(idle) < 256:
            idle.append((reader, writer))
        else:
            writer.close()
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in answer["headers"]]
        return answer["status"], headers, content

    async def _serve_forwarded(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                try:
                    head_len, body_len = _FRAME.unpack(await reader.readexactly(_FRAME.size))
                except asyncio.IncompleteReadError:
                    return
                meta = json.loads(await reader.readexactly(head_len))
                body = await reader.readexactly(body_len)
                try:
                    status, headers, content = await self._run_forwarded(meta, body)
                except Exception as exc:  # the handler's own crash, not a lost session
                    route = f"{meta['method']} {meta['path']}"
                    status, headers = 500, [["content-type", "application/json"]]
                    content = json.dumps(
                        error_body(self.name, route, f"raised {type(exc).__name__}: {exc}", error=type(exc).__name__)
                    ).encode()
                head = json.dumps({"status": status, "headers": headers}).encode()
                writer.write(_FRAME.pack(len(head), len(content)) + head + content)
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            return
        finally:
            writer.close()

    async def _run_forwarded(self, meta: dict, body: bytes):
        scope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": meta["http_version"],
            "method": meta["method"],
            "scheme": meta["scheme"],
            "path": meta["path"],
            "raw_path": meta["raw_path"].encode("latin-1"),
            "query_string": meta["query_string"].encode("latin-1"),
            "root_path": meta["root_path"],
            "headers": [(k.encode("latin-1"), v.encode("latin-1")) for k, v in meta["headers"]],
            "client": tuple(meta["client"]) if meta["client"] else None,
            "server": tuple(meta["server"]) if meta["server"] else None,
            "state": dict(self._state or {}),
        }
        done = asyncio.Event()
        start: dict = {}
        chunks: list[bytes] = []

        async def receive():
            if not sent_body[0]:
                sent_body[0] = True
                return {"type": "http.request", "body": body, "more_body": False}
            await done.wait()
            return {"type": "http.disconnect"}

        async def send(message):
            if message["type"] == "http.response.start":
                start.update(message)
            elif message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    done.set()

        sent_body = [False]
        row = tuple(meta["row"]) if meta["row"] else None
        await self._local(scope, receive, send, meta["kind"], meta["sid"], row, body)
        done.set()
        headers = [[k.decode("latin-1"), v.decode("latin-1")] for k, v in start.get("headers", ())]
        return start.get("status", 500), headers, b"".join(chunks)


def _body_sid(body: bytes) -> str | None:
    if b"_session_id" not in body:
        return None
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if isinstance(data, dict):
        for key in BODY_ID_KEYS:
            if isinstance(data.get(key), str) and 0 < len(data[key]) <= MAX_SESSION_ID_LENGTH:
                return data[key]
    return None


def _close_follows(body: bytes | None) -> bool:
    if not body or b"close_follows" not in body:
        return False
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return False
    return isinstance(data, dict) and data.get("close_follows") is True


async def _json(send, status: int, content: dict) -> None:
    payload = json.dumps(content).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(payload)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": payload})
