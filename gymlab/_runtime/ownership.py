"""Session ownership routing: with several workers, each session request runs in the worker holding it,
found in a SQLite table the workers share and reached over its private Unix socket (docs/runtime.md)."""

from __future__ import annotations

import asyncio
import json
import math
import os
import secrets
import struct
import time

from gymlab._http.inproc import exchange
from gymlab._runtime.bodies import BODY_KEY, close_follows, error_response
from gymlab._runtime.routes import END, NONE, SESSION_ENDED, START, USE, VERIFY, RouteKinds
from gymlab._runtime.sessions import SessionCookie, body_session_id, conflict
from gymlab.errors import error_body
from gymlab.protocol.resources import SESSION_ID_KEY

#: Every answer a worker gives to a session request names it (``x-gymlab-worker: <pid>``).
WORKER_HEADER = b"x-gymlab-worker"
#: A forwarded answer also names the worker that received the request.
FORWARDED_HEADER = b"x-gymlab-forwarded-by"
TOUCH_EVERY_S = 1.0
TABLE = "owners.sqlite"

_FRAME = struct.Struct("!II")
#: The scope keys a forwarded request carries as they are (with their defaults), besides its bytes and headers.
_SCOPE_KEYS = {"method": None, "path": None, "root_path": "", "scheme": "http", "http_version": "1.1"}


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


def worker_alive(worker: str) -> bool:
    try:
        os.kill(int(worker.split("-", 1)[0]), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, ValueError):  # another user's process, or not a pid: not provably gone
        pass
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

    def __init__(self, app, server, state_dir: str, kinds: RouteKinds, cookie: SessionCookie):
        self.app, self.name, self.dir, self.kinds, self.cookie = app, server.name, state_dir, kinds, cookie
        self.window = float(getattr(server, "session_close_retry_window_seconds", 300.0))
        self.worker = f"{os.getpid()}-{secrets.token_hex(4)}"
        self._pid = str(os.getpid()).encode()
        self.table: OwnershipTable | None = None
        self._pool: dict[str, list[tuple[asyncio.StreamReader, asyncio.StreamWriter]]] = {}
        self._rpc: asyncio.base_events.Server | None = None
        self._rpc_lock = asyncio.Lock()
        self._state: dict | None = None  # the worker's lifespan state, for the requests forwarded here

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        kind = self.kinds.kind(scope)
        if kind == NONE:
            return await self.app(scope, receive, send)
        if self._rpc is None:
            self._state = scope.get("state")
            await self._start()
        sid, body = self.cookie.sid(scope), None
        if kind != USE:
            body = scope[BODY_KEY]
            if kind != VERIFY:
                named = body_session_id(body)
                body_sid = named[1] if named else None
                if sid and body_sid and sid != body_sid:
                    message = (
                        f"the cookie names session {sid} but the body names {body_sid}; "
                        "send the seed, its requests and its close with one session's cookie"
                    )
                    return await conflict(self.name, scope, message, session_id=body_sid)(scope, receive, send)
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
            return await self._gone(scope, receive, send, sid, row, now)
        try:
            status, headers, answer = await self._forward(row, scope, scope[BODY_KEY], kind, sid)
        except (OSError, asyncio.IncompleteReadError):
            return await self._gone(scope, receive, send, sid, row, now)
        await send(
            {"type": "http.response.start", "status": status, "headers": [*headers, (FORWARDED_HEADER, self._pid)]}
        )
        await send({"type": "http.response.body", "body": answer})

    async def _local(self, scope, receive, send, kind, sid, row, body):
        async def settle_then_send(message):
            if message["type"] == "http.response.start":
                self._settle(scope, kind, sid, row, message["status"], body)
                message = {**message, "headers": [*message.get("headers", ()), (WORKER_HEADER, self._pid)]}
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
        elif kind == END or scope.get(SESSION_ENDED) or (kind == VERIFY and not close_follows(body)) or row is None:
            self.table.record(sid, self.worker, 0, now)
        elif not row[1] and now - row[2] > TOUCH_EVERY_S:
            self.table.touch(sid, now)

    async def _gone(self, scope, receive, send, sid, row, now):
        if now - row[2] > TOUCH_EVERY_S:
            self.table.touch(sid, now)  # keeps answering 410 until the window passes in silence
        message = (
            f"session {sid} was held by worker {row[0].split('-', 1)[0]}, which is no longer running "
            "(it crashed or was replaced), so its state is gone"
        )
        hint = "this episode cannot continue; start a new one (a new session)"
        answer = error_response(self.name, scope, 410, message, error="SessionLost", session_id=sid, hint=hint)
        await answer(scope, receive, send)

    def _socket_path(self, worker: str) -> str:
        return os.path.join(self.dir, f"w{worker}.sock")

    async def _start(self) -> None:
        async with self._rpc_lock:
            if self._rpc is None:
                self.table = OwnershipTable(os.path.join(self.dir, TABLE), self.window)
                self._rpc = await asyncio.start_unix_server(self._serve_forwarded, self._socket_path(self.worker))

    async def _forward(self, row, scope, body: bytes, kind: int, sid: str):
        path = self._socket_path(row[0])
        idle = self._pool.setdefault(path, [])
        reader, writer = idle.pop() if idle else await asyncio.open_unix_connection(path)
        meta = {key: scope.get(key, default) for key, default in _SCOPE_KEYS.items()}
        meta.update(
            {key: (scope.get(key) or b"").decode("latin-1") for key in ("raw_path", "query_string")},
            headers=[[k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"]],
            client=scope.get("client"),
            server=scope.get("server"),
            kind=kind,
            sid=sid,
            row=list(row),
        )
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
        scope = {key: meta[key] for key in _SCOPE_KEYS}
        scope.update(
            {key: meta[key].encode("latin-1") for key in ("raw_path", "query_string")},
            type="http",
            asgi={"version": "3.0", "spec_version": "2.3"},
            headers=[(k.encode("latin-1"), v.encode("latin-1")) for k, v in meta["headers"]],
            client=tuple(meta["client"]) if meta["client"] else None,
            server=tuple(meta["server"]) if meta["server"] else None,
            state=dict(self._state or {}),
        )
        scope[BODY_KEY] = body
        row = tuple(meta["row"]) if meta["row"] else None

        async def app(scope, receive, send):
            await self._local(scope, receive, send, meta["kind"], meta["sid"], row, body)

        status, heads, content = await exchange(
            app, scope, body, f"{self.name}: {meta['method']} {meta['path']}", math.inf
        )
        return status, [[k.decode("latin-1"), v.decode("latin-1")] for k, v in heads], content
