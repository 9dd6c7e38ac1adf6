"""Per-rollout session IDs in a signed cookie (Starlette's format), only where a session is used; a seed or
close body's session ID becomes the session's (docs/runtime.md)."""

from __future__ import annotations

import json
import time
import uuid
from base64 import b64decode, b64encode
from collections import OrderedDict

from itsdangerous import BadSignature, TimestampSigner
from starlette.responses import JSONResponse

from gymlab._http.cookies import expired_cookie, scope_cookie, set_cookie, set_cookie_attributes
from gymlab._runtime.bodies import BODY_KEY, error_response, parse_json, parsed_body
from gymlab._runtime.routes import BODY_ID_KEYS, END, NONE, START, RouteKinds
from gymlab.protocol.resources import SESSION_ID_KEY
from gymlab.protocol.sessions import MAX_SESSION_ID_LENGTH

#: Routes that never touch a session, whatever the app (the idle-session reaper skips them).
SESSIONLESS_ROUTES = frozenset({"/health", "/aggregate_metrics", "/openapi.json", "/docs"})


def body_session_id(body: bytes, scope: dict | None = None) -> tuple[str, str] | None:
    """``(key, id)`` of the session a JSON body names, or None; the parsed body is left in ``scope``."""
    if not body or b"_session_id" not in body:
        return None
    try:
        data = parse_json(body) if scope is None else parsed_body(scope, body)
    except (ValueError, RecursionError):
        return None
    if isinstance(data, dict):
        for key in BODY_ID_KEYS:
            sid = data.get(key)
            if isinstance(sid, str) and 0 < len(sid) <= MAX_SESSION_ID_LENGTH:
                return key, sid
    return None


#: How many verified cookie values a server remembers (least recently used dropped first; a value that fails
#: is never kept): more than the sessions in flight at once, few enough that reaped sessions do not stay here.
_CACHE_SIZE = 2048
#: A session cookie's age limit (Starlette's default), and its flags.
_MAX_AGE = 14 * 24 * 60 * 60
_FLAGS = "httponly; samesite=lax"


class _Signer(TimestampSigner):
    """itsdangerous's timestamp signer, keeping the timestamp it last signed with."""

    last = 0

    def get_timestamp(self) -> int:
        self.last = super().get_timestamp()
        return self.last


class SessionCookie:
    """A server's signed session cookie, read by the session middleware and the worker router, verified once
    (a value this server signed is known without verifying it)."""

    def __init__(self, secret: str, name: str):
        self.name, self.signer = name, _Signer(secret)
        self._verified: OrderedDict[str, tuple[dict, float]] = OrderedDict()  # value -> (session, signed at)
        self._attrs = set_cookie_attributes("/", _MAX_AGE, _FLAGS)

    def read(self, scope) -> dict | None:
        """The session the request's cookie holds, or None (none, a bad signature, garbage, or too old)."""
        value = scope_cookie(scope["headers"], self.name)
        if value is None:
            return None
        known = self._verified.get(value)
        if known is None:
            try:
                known = self._verify(value)
            except (BadSignature, ValueError, TypeError):
                return None  # a value that fails is never kept
            self._remember(value, known)
        else:
            self._verified.move_to_end(value)
        session, signed_at = known
        return session if time.time() - signed_at <= _MAX_AGE else None

    def sid(self, scope) -> str | None:
        """The session ID the request's cookie names, or None."""
        sid = (self.read(scope) or {}).get(SESSION_ID_KEY)
        return sid if isinstance(sid, str) else None

    def header(self, session: dict) -> bytes:
        """The ``Set-Cookie`` value holding ``session`` (an empty one clears the cookie)."""
        if not session:
            return expired_cookie(self.name, "/", _FLAGS)
        text = json.dumps(session)
        value = self.signer.sign(b64encode(text.encode())).decode()
        self._remember(value, (json.loads(text), float(self.signer.last)))  # as verifying it would read it
        return set_cookie(self.name, value, self._attrs)

    def _remember(self, value: str, known: tuple[dict, float]) -> None:
        self._verified[value] = known
        if len(self._verified) > _CACHE_SIZE:
            self._verified.popitem(last=False)  # the least recently used

    def _verify(self, value: str) -> tuple[dict, float]:
        data, signed = self.signer.unsign(value.encode(), max_age=_MAX_AGE, return_timestamp=True)
        session = json.loads(b64decode(data))
        if not isinstance(session, dict):
            raise TypeError(f"the session cookie holds a {type(session).__name__}, not a session")
        return session, signed.timestamp()


class SessionMiddleware:
    """Each session-using request's session ID, kept in the signed cookie (``Set-Cookie`` only on a change);
    the held session it names is busy until it ends (its idle time starts then)."""

    def __init__(self, app, cookie: SessionCookie, server, kinds: RouteKinds):
        self.app, self.cookie, self.server_name, self.kinds = app, cookie, server.name, kinds
        self.episodes = getattr(server, "episode_sessions", None)  # None for a server without them

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        kind = self.kinds.kind(scope)
        initial = self.cookie.read(scope)
        if kind == NONE:  # the handler cannot see the session: no ID, no cookie (the reaper still reads it)
            if initial:
                scope["session"] = dict(initial)
            return await self._held(scope, receive, send, None)
        session = scope["session"] = dict(initial or {})
        named_only = None  # the body key of a seed naming its session without that session's cookie
        if kind in (START, END) and scope["method"] == "POST":
            named = body_session_id(scope[BODY_KEY], scope)
            current = session.get(SESSION_ID_KEY)
            if named is not None and current is not None and current != named[1]:
                message = (
                    f"the session cookie names session {current!r} but the body's {named[0]} names {named[1]!r}; "
                    f"use one cookie jar per episode and send the episode's own {named[0]}"
                )
                refusal = conflict(
                    self.server_name, scope, message, cookie_session_id=current, body_session_id=named[1]
                )
                return await refusal(scope, receive, send)
            if named is not None:
                session[SESSION_ID_KEY] = named[1]
                if current is None and kind == START:
                    named_only = named[0]  # refused below if the session is live
        if SESSION_ID_KEY not in session and self.kinds.assigns_id(scope):
            session[SESSION_ID_KEY] = uuid.uuid4().hex
        before = initial or {}

        async def send_with_cookie(message):
            if message["type"] == "http.response.start" and session != before:
                if named_only and message["status"] >= 400:  # no cookie for an ID it only read somewhere
                    return await send(message)
                header = self.cookie.header(session)
                message = {**message, "headers": [*message.get("headers", ()), (b"set-cookie", header)]}
            await send(message)

        await self._held(scope, receive, send_with_cookie, named_only)

    async def _held(self, scope, receive, send, named_only: str | None) -> None:
        """The request, its held session busy meanwhile; a cookieless seed of a live session refused."""
        episodes, session = self.episodes, scope.get("session")
        sid = session.get(SESSION_ID_KEY) if session else None
        if episodes is None or not isinstance(sid, str) or scope["path"] in SESSIONLESS_ROUTES:
            return await self.app(scope, receive, send)
        if named_only is not None and episodes.foreign_seed(named_only, sid):
            message = (
                f"session {sid!r} is bound to a live episode, and this seed does not carry its cookie; "
                f"seed a new episode with a fresh {named_only} (a session's own requests send its cookie)"
            )
            return await conflict(self.server_name, scope, message, body_session_id=sid)(scope, receive, send)
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


def conflict(server_name: str, scope: dict, message: str, **fields) -> JSONResponse:
    """The 409 a session conflict is answered with, naming server, route and cause."""
    return error_response(server_name, scope, 409, message, error="ResourcesSessionConflictError", **fields)
