"""Which session use a request has, decided from the route and its handler: one rule for the session
cookie and worker routing (docs/runtime.md)."""

from __future__ import annotations

from typing import Any

NONE, USE, START, END, VERIFY = range(5)

#: Routes that open a session's ownership (besides a server's ``checkpoint_session_starts``).
START_ROUTES = frozenset({"/seed_session", "/reset", "/v1/agent_sessions"})
#: Routes that end it (besides ``/verify`` and a server's ``checkpoint_session_ended``).
END_ROUTES = frozenset({"/close_session", "/close", "/v1/agent_sessions/close"})
#: Set in a request's scope by the server that ended its session in it (a Gymnasium step that
#: terminated): the worker router reads it, never the answer's bytes.
SESSION_ENDED = "gymlab.session_ended"
#: Body keys that name a session in a seed or close (resources server, agent server).
BODY_ID_KEYS = ("resources_session_id", "agent_session_id")


class RouteKinds:
    """The route and session kind of each ``(method, path)`` of one app, cached (routes read at request time)."""

    def __init__(self, server: Any):
        cls = type(server)
        self.app: Any = None  # the app, set once it is built
        self.starts = START_ROUTES | frozenset(getattr(cls, "checkpoint_session_starts", ()))
        self.ends = END_ROUTES | frozenset(getattr(cls, "checkpoint_session_ended", ()))
        self._kinds: dict[tuple[str, str], tuple[int, bool, Any]] = {}

    def kind(self, scope: dict) -> int:
        """NONE, USE, START, END or VERIFY."""
        return self._lookup(scope)[0]

    def assigns_id(self, scope: dict) -> bool:
        """Whether a request without a session ID gets one: a seed always, else when its handler reads it."""
        kind, uses, _ = self._lookup(scope)
        return kind == START or (kind != NONE and uses)

    def route(self, scope: dict) -> Any:
        """The route the request goes to (the first that fully matches), or None."""
        return self._lookup(scope)[2]

    def _lookup(self, scope: dict) -> tuple[int, bool, Any]:
        key = (scope["method"], scope["path"])
        found = self._kinds.get(key)
        if found is None:
            found = self._classify(scope)
            if len(self._kinds) < 4096:
                self._kinds[key] = found
        return found

    def _classify(self, scope: dict) -> tuple[int, bool, Any]:
        from starlette.routing import Match

        a = self.app
        docs = {a.openapi_url, a.docs_url, a.redoc_url, a.swagger_ui_oauth2_redirect_url}
        for route in a.router.routes:
            match, _ = route.matches(scope)
            if match == Match.FULL:
                path = getattr(route, "path", scope["path"])
                uses = path not in docs and uses_session(route)
                for kind, paths in ((START, self.starts), (END, self.ends), (VERIFY, ("/verify",))):
                    if path in paths:
                        return kind, uses, route
                return (USE, True, route) if uses else (NONE, False, route)
        return NONE, False, None  # no route: a 404 (or 405) that no session is needed for


def sessionless(handler):
    """Mark a handler that takes the ``Request`` but never uses the session: no ID, cookie or ownership."""
    handler.gymlab_sessionless = True
    return handler


def uses_session(route: Any) -> bool:
    """Whether a route's handler (or a dependency of it) takes the Request, and so can see the session."""
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return True
    if getattr(getattr(route, "endpoint", None), "gymlab_sessionless", False):
        return False
    stack = [dependant]
    while stack:
        d = stack.pop()
        if d.request_param_name or d.http_connection_param_name or d.websocket_param_name:
            return True
        stack.extend(d.dependencies)
    return False
