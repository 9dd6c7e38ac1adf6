"""Per-rollout session ids inside Starlette's signed session cookie.

Starlette's ``SessionMiddleware`` (itsdangerous-signed) carries the cookie; this middleware, inside
it, makes sure every HTTP request's session has a ``SESSION_ID_KEY`` so handlers can key state by it.
"""

from __future__ import annotations

import uuid

from gymlab.protocol.resources import SESSION_ID_KEY

#: Routes that never read or write a session; they get no id and so no cookie.
SESSIONLESS_ROUTES = frozenset({"/health", "/aggregate_metrics", "/openapi.json", "/docs"})


class SessionIdMiddleware:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"] not in SESSIONLESS_ROUTES:
            session = scope.get("session")
            if session is not None and SESSION_ID_KEY not in session:
                session[SESSION_ID_KEY] = uuid.uuid4().hex
        await self.app(scope, receive, send)
