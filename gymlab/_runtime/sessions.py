"""Per-rollout session ids inside Starlette's signed session cookie.

Starlette's ``SessionMiddleware`` (itsdangerous-signed) carries the cookie; this middleware, inside
it, makes sure every HTTP request's session has a ``SESSION_ID_KEY`` so handlers can key state by it.

An episode seed or close names its session in the body (``resources_session_id``): that ID becomes
the session's ``SESSION_ID_KEY``, so the seed, its close and every request in between (which carry
the cookie) name the session by the same ID. A request whose cookie and body name different
sessions is answered 409 before any handler runs.
"""

from __future__ import annotations

import json
import uuid

from starlette.responses import JSONResponse

from gymlab.errors import error_body
from gymlab._runtime.bodies import request_body
from gymlab.protocol.resources import SESSION_ID_KEY
from gymlab.protocol.sessions import MAX_SESSION_ID_LENGTH

#: Routes that never read or write a session; they get no id and so no cookie.
SESSIONLESS_ROUTES = frozenset({"/health", "/aggregate_metrics", "/openapi.json", "/docs"})

#: Routes whose JSON body may name the session (``resources_session_id``).
EPISODE_ROUTES = frozenset({"/seed_session", "/close_session"})


def body_session_id(body: bytes) -> str | None:
    """The ``resources_session_id`` a JSON body names, or None (not JSON, not an object, not a string
    of 1 to ``MAX_SESSION_ID_LENGTH`` characters: the route's validation then answers 4xx)."""
    try:
        data = json.loads(body) if body else None
    except (ValueError, RecursionError):
        return None
    sid = data.get("resources_session_id") if isinstance(data, dict) else None
    return sid if isinstance(sid, str) and 0 < len(sid) <= MAX_SESSION_ID_LENGTH else None


class SessionIdMiddleware:
    def __init__(self, app, server_name: str = ""):
        self.app, self.server_name = app, server_name

    async def __call__(self, scope, receive, send):
        session = scope.get("session") if scope["type"] == "http" else None
        if session is None or scope["path"] in SESSIONLESS_ROUTES:
            return await self.app(scope, receive, send)
        if scope["path"] in EPISODE_ROUTES and scope["method"] == "POST":
            body, receive = await request_body(scope, receive)
            named = body_session_id(body)
            current = session.get(SESSION_ID_KEY)
            if named is not None and current is not None and current != named:
                return await self._conflict(scope, current, named)(scope, receive, send)
            if named is not None:
                session[SESSION_ID_KEY] = named
        if SESSION_ID_KEY not in session:
            session[SESSION_ID_KEY] = uuid.uuid4().hex
        await self.app(scope, receive, send)

    def _conflict(self, scope, cookie_id: str, body_id: str) -> JSONResponse:
        route = f"{scope['method']} {scope['path']}"
        message = (
            f"the session cookie names session {cookie_id!r} but the body names {body_id!r}; "
            "use one cookie jar per episode and send the episode's own resources_session_id"
        )
        body = error_body(self.server_name, route, message, error="ResourcesSessionConflictError",
                          cookie_session_id=cookie_id, body_session_id=body_id)
        return JSONResponse(status_code=409, content=body)
