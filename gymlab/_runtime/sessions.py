"""Per-rollout session IDs in a signed session cookie, decoded and set only where a session is used.

The cookie is Starlette's (name, format, secret); a request whose handler cannot see the session
(``routes.RouteKinds``) gets none, a cookie is verified once per value, ``Set-Cookie`` is sent only on a
change, and a seed or close body's session ID becomes the session's (409 when the cookie names another).
docs/runtime.md has the rules.
"""

from __future__ import annotations

import json
import time
import uuid
from base64 import b64decode, b64encode

from itsdangerous import BadSignature
from starlette.middleware.sessions import Session
from starlette.middleware.sessions import SessionMiddleware as _StarletteSessions
from starlette.responses import JSONResponse

from gymlab._http.cookies import expired_cookie, scope_cookie, set_cookie, set_cookie_attributes
from gymlab._runtime.bodies import PARSED_KEY, parse_json, request_body
from gymlab._runtime.routes import BODY_ID_KEYS, END, NONE, START, USE, RouteKinds
from gymlab.errors import error_body
from gymlab.protocol.resources import SESSION_ID_KEY
from gymlab.protocol.sessions import MAX_SESSION_ID_LENGTH

#: Routes that never touch a session, whatever the app (the idle-session reaper skips them).
SESSIONLESS_ROUTES = frozenset({"/health", "/aggregate_metrics", "/openapi.json", "/docs"})
#: Set on a seed whose body names its session without that session's cookie: the body key naming it.
NAMED_WITHOUT_COOKIE = "gymlab.named_without_cookie"


def body_session_id(body: bytes, scope: dict | None = None) -> tuple[str, str] | None:
    """``(key, id)`` of the session a JSON body names, or None (not JSON, not an object, no ID of 1 to
    ``MAX_SESSION_ID_LENGTH`` characters: the route then answers 4xx); the parsed body is left in ``scope``."""
    if not body or b"_session_id" not in body:
        return None
    try:
        data = parse_json(body)
    except (ValueError, RecursionError):
        return None
    if scope is not None:
        scope[PARSED_KEY] = (body, data)
    if isinstance(data, dict):
        for key in BODY_ID_KEYS:
            sid = data.get(key)
            if isinstance(sid, str) and 0 < len(sid) <= MAX_SESSION_ID_LENGTH:
                return key, sid
    return None


#: How many verified cookie values a server remembers (then it starts again): more than the sessions
#: in flight at once, few enough that reaped sessions do not stay held here.
_CACHE_SIZE = 2048


class SessionMiddleware(_StarletteSessions):
    """The session cookie, and the ID of the session each request that uses one works in: Starlette's
    cookie (name, signer, age), with its behaviour for HTTP requests replaced."""

    def __init__(
        self,
        app,
        secret_key: str,
        session_cookie: str,
        server_name: str = "",
        kinds: RouteKinds | None = None,
        **options,
    ):
        super().__init__(app, secret_key=secret_key, session_cookie=session_cookie, **options)
        self.server_name, self.kinds = server_name, kinds
        self._verified: dict[str, tuple[dict, float]] = {}  # cookie value -> (session, signed at)
        self._attrs = set_cookie_attributes(self.path, self.max_age, self.security_flags)

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await super().__call__(scope, receive, send)
        kind = self.kinds.kind(scope) if self.kinds is not None else USE
        value = scope_cookie(scope["headers"], self.session_cookie)
        initial = self._decode(value) if value is not None else None
        if kind == NONE:  # the handler cannot see the session: no ID, no cookie (the reaper still reads it)
            if initial:
                scope["session"] = dict(initial)
            return await self.app(scope, receive, send)
        session = scope["session"] = Session(initial or {})
        if kind in (START, END) and scope["method"] == "POST":
            body, receive = await request_body(scope, receive)
            named = body_session_id(body, scope)
            current = session.get(SESSION_ID_KEY)
            if named is not None and current is not None and current != named[1]:
                return await self._conflict(scope, current, *named)(scope, receive, send)
            if named is not None:
                session[SESSION_ID_KEY] = named[1]
                if current is None and kind == START:
                    scope[NAMED_WITHOUT_COOKIE] = named[0]  # the reaper's middleware refuses a live one
        if SESSION_ID_KEY not in session and (self.kinds is None or self.kinds.assigns_id(scope)):
            session[SESSION_ID_KEY] = uuid.uuid4().hex
        before = initial or {}
        named_only = NAMED_WITHOUT_COOKIE in scope  # refused, it gets no cookie for an ID it only read somewhere

        async def send_with_cookie(message):
            if message["type"] == "http.response.start" and session != before:
                if named_only and message["status"] >= 400:
                    return await send(message)
                header = self._set_cookie(session) if session else self._cleared()
                message = {**message, "headers": [*message.get("headers", ()), (b"set-cookie", header)]}
            await send(message)

        await self.app(scope, receive, send_with_cookie)

    def _decode(self, value: str) -> dict | None:
        """The session a cookie value holds, or None (a bad signature, garbage, or older than max_age)."""
        now = time.time()
        found = self._verified.get(value)
        if found is None:
            try:
                data, signed = self.signer.unsign(value.encode(), max_age=self.max_age, return_timestamp=True)
                session = json.loads(b64decode(data))
            except (BadSignature, ValueError, TypeError):
                return None
            if not isinstance(session, dict):
                return None
            found = self._remember(value, session, signed.timestamp())
        if self.max_age is not None and now - found[1] > self.max_age:
            return None
        return found[0]

    def _remember(self, value: str, session: dict, signed_at: float) -> tuple[dict, float]:
        if len(self._verified) >= _CACHE_SIZE:
            self._verified.clear()
        self._verified[value] = (dict(session), signed_at)
        return self._verified[value]

    def _set_cookie(self, session: dict) -> bytes:
        value = self.signer.sign(b64encode(json.dumps(session).encode())).decode()
        self._remember(value, session, time.time())
        return set_cookie(self.session_cookie, value, self._attrs)

    def _cleared(self) -> bytes:
        return expired_cookie(self.session_cookie, self.path, self.security_flags)

    def _conflict(self, scope, cookie_id: str, key: str, body_id: str) -> JSONResponse:
        message = (
            f"the session cookie names session {cookie_id!r} but the body's {key} names {body_id!r}; "
            f"use one cookie jar per episode and send the episode's own {key}"
        )
        return conflict(self.server_name, scope, message, cookie_session_id=cookie_id, body_session_id=body_id)


def conflict(server_name: str, scope: dict, message: str, **fields) -> JSONResponse:
    """The 409 a session conflict is answered with, naming server, route and cause."""
    route = f"{scope['method']} {scope['path']}"
    body = error_body(server_name, route, message, error="ResourcesSessionConflictError", **fields)
    return JSONResponse(status_code=409, content=body)
