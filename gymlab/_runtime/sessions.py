"""Per-rollout session ids inside Starlette's signed session cookie.

Starlette's ``SessionMiddleware`` (itsdangerous-signed) carries the cookie; this middleware, inside
it, makes sure every HTTP request's session has a ``SESSION_ID_KEY`` so handlers can key state by it.

Which requests get an ID is decided from the route and its handler (``routes.RouteKinds``, the rule
worker routing uses too): a request whose handler never reads or writes the session gets none, and so
no cookie. An episode seed or close names its session in the body (``resources_session_id``, or an
agent session's ``agent_session_id``): that ID becomes the session's ``SESSION_ID_KEY``, so the seed,
its close and every request in between (which carry the cookie) name the session by the same ID. A
request whose cookie and body name different sessions is answered 409 before any handler runs.
"""

from __future__ import annotations

import json
import uuid

from starlette.responses import JSONResponse

from gymlab._runtime.bodies import request_body
from gymlab._runtime.routes import BODY_ID_KEYS, END, NONE, START, USE, RouteKinds
from gymlab.errors import error_body
from gymlab.protocol.resources import SESSION_ID_KEY
from gymlab.protocol.sessions import MAX_SESSION_ID_LENGTH

#: Routes that never touch a session, whatever the app (the idle-session reaper skips them).
SESSIONLESS_ROUTES = frozenset({"/health", "/aggregate_metrics", "/openapi.json", "/docs"})


def body_session_id(body: bytes) -> tuple[str, str] | None:
    """``(key, id)`` of the session a JSON body names (``resources_session_id`` or ``agent_session_id``),
    or None (not JSON, not an object, not a string of 1 to ``MAX_SESSION_ID_LENGTH`` characters: the
    route's validation then answers 4xx)."""
    if not body or b"_session_id" not in body:
        return None
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if isinstance(data, dict):
        for key in BODY_ID_KEYS:
            sid = data.get(key)
            if isinstance(sid, str) and 0 < len(sid) <= MAX_SESSION_ID_LENGTH:
                return key, sid
    return None


class SessionIdMiddleware:
    """Inside Starlette's session middleware: give the requests that use a session its ID."""

    def __init__(self, app, server_name: str = "", kinds: RouteKinds | None = None):
        self.app, self.server_name, self.kinds = app, server_name, kinds

    async def __call__(self, scope, receive, send):
        session = scope.get("session") if scope["type"] == "http" else None
        if session is None:
            return await self.app(scope, receive, send)
        kind = self.kinds.kind(scope) if self.kinds is not None else USE
        if kind == NONE:  # the handler cannot see the session: no ID, no cookie
            return await self.app(scope, receive, send)
        if kind in (START, END) and scope["method"] == "POST":
            body, receive = await request_body(scope, receive)
            named = body_session_id(body)
            current = session.get(SESSION_ID_KEY)
            if named is not None and current is not None and current != named[1]:
                return await self._conflict(scope, current, *named)(scope, receive, send)
            if named is not None:
                session[SESSION_ID_KEY] = named[1]
        if SESSION_ID_KEY not in session and (self.kinds is None or self.kinds.assigns_id(scope)):
            session[SESSION_ID_KEY] = uuid.uuid4().hex
        await self.app(scope, receive, send)

    def _conflict(self, scope, cookie_id: str, key: str, body_id: str) -> JSONResponse:
        route = f"{scope['method']} {scope['path']}"
        message = (
            f"the session cookie names session {cookie_id!r} but the body's {key} names {body_id!r}; "
            f"use one cookie jar per episode and send the episode's own {key}"
        )
        body = error_body(
            self.server_name,
            route,
            message,
            error="ResourcesSessionConflictError",
            cookie_session_id=cookie_id,
            body_session_id=body_id,
        )
        return JSONResponse(status_code=409, content=body)
