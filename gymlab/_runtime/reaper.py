"""Each held session's idle time (``SessionActivityMiddleware``, which also refuses a cookieless seed of a
live session) and the idle-session reaper (``reaping``)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from gymlab._runtime.sessions import NAMED_WITHOUT_COOKIE, SESSIONLESS_ROUTES, conflict
from gymlab.protocol.resources import SESSION_ID_KEY

log = logging.getLogger("gymlab.server")


class SessionActivityMiddleware:
    """Inside the session middleware: touch the request's session (its idle time starts when it ends)."""

    def __init__(self, app, server):
        self.app, self.server = app, server
        self.episodes = getattr(server, "episode_sessions", None)  # None for a server without them

    async def __call__(self, scope, receive, send):
        episodes = self.episodes
        session = scope.get("session") if scope["type"] == "http" else None
        sid = session.get(SESSION_ID_KEY) if session else None
        if episodes is None or not isinstance(sid, str) or scope["path"] in SESSIONLESS_ROUTES:
            return await self.app(scope, receive, send)
        key = scope.get(NAMED_WITHOUT_COOKIE)
        if key is not None and episodes.foreign_seed(key, sid):
            message = (
                f"session {sid!r} is bound to a live episode, and this seed does not carry its cookie; "
                f"seed a new episode with a fresh {key} (a session's own requests send its cookie)"
            )
            return await conflict(self.server.name, scope, message, body_session_id=sid)(scope, receive, send)
        verify, status = scope["path"] == "/verify", 0

        async def watch(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        episodes.begin(sid)
        try:
            await self.app(scope, receive, watch if verify else send)
        finally:
            if verify and 200 <= status < 300:
                episodes.flat_released(sid)
            episodes.end(sid)


@contextlib.asynccontextmanager
async def reaping(episodes, name: str) -> AsyncIterator[None]:
    """A lifespan part: the idle-session reaper runs as a task from the server's startup to its stop."""
    task = asyncio.get_running_loop().create_task(_reap_forever(episodes, name))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def _reap_forever(episodes, name: str) -> None:
    while True:
        await asyncio.sleep(min(episodes.sweep_interval(), 1.0))  # a changed ttl_seconds applies within 1 s
        try:
            await episodes.maybe_reap()
        except Exception:  # the next sweep tries again; a crashed reaper would free nothing
            log.exception("%s: the idle-session reaper failed", name)
