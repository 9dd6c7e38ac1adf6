"""Build a server's FastAPI app: its middleware list, error handlers and one composed lifespan, in one place."""

from __future__ import annotations

import contextlib
import inspect
import json
import logging
import traceback
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware import Middleware

from gymlab._runtime.bodies import BodyGuardMiddleware, error_response
from gymlab._runtime.ownership import SessionOwnershipMiddleware
from gymlab._runtime.plain import PlainDispatch, PlainRoute
from gymlab._runtime.routes import RouteKinds
from gymlab._runtime.sessions import SessionCookie, SessionMiddleware
from gymlab._runtime.spec import ServerSpec
from gymlab._runtime.workers import worker_context
from gymlab._traces import cause_line, without_paths
from gymlab.errors import ResourcesSessionError, error_body
from gymlab.protocol.failure_kinds import Failure
from gymlab.protocol.validation import describe_validation

log = logging.getLogger("gymlab.server")


def build_app(server: ServerSpec) -> FastAPI:
    """The FastAPI app for ``server`` (a ``ServerSpec``): its middleware list, error handlers and lifespan."""
    kinds = RouteKinds(server)  # one rule for the cookie, worker routing and plain dispatch

    @contextlib.asynccontextmanager
    async def lifespan(_app: Any) -> AsyncIterator[None]:
        """The server's ``lifespan_parts()`` in order, then the idle-session reaper (so first out)."""
        async with contextlib.AsyncExitStack() as stack:
            for part in server.lifespan_parts():
                await stack.enter_async_context(part)
            if (episodes := getattr(server, "episode_sessions", None)) is not None:
                await stack.enter_async_context(episodes.reaping(server.name))
            yield

    options: dict[str, Any] = {"middleware": _middleware(server, kinds), "exception_handlers": _handlers(server.name)}
    app = FastAPI(title=f"gymlab {server.name}", lifespan=lifespan, **options)
    telemetry = getattr(app, "_native_telemetry", None)
    if telemetry is not None and not telemetry.enabled():  # FastAPI's OpenTelemetry, asked every request
        options["telemetry"] = {"tracing": False, "metrics": False, "logs": False}
        app = FastAPI(title=f"gymlab {server.name}", lifespan=lifespan, **options)
    kinds.app = app
    app.router.route_class = PlainRoute  # FastAPI's documented custom route class, for every route added

    @app.get("/health")
    async def health() -> dict:
        episodes = getattr(server, "episode_sessions", None)
        answer = {"status": "ok", "server": server.name}
        if episodes is not None:
            answer["sessions"] = episodes.counts()
        return answer

    return app


def _middleware(server: ServerSpec, kinds: RouteKinds) -> list[Middleware]:
    """Outermost first: ``middleware_parts()``, the body guard, the worker router (with several workers), the
    session cookie and activity, the crash guard (Starlette's handler would re-raise), plain dispatch."""
    name = server.name
    safe = "".join(c if c.isalnum() else "_" for c in name)
    cookie = SessionCookie(server.session_secret.get_secret_value(), f"gymlab_{safe}")
    limits = {"/aggregate_metrics": server.max_metrics_body_bytes}
    stack = server.middleware_parts()
    stack.append(
        Middleware(BodyGuardMiddleware, server_name=name, max_bytes=server.max_body_bytes, route_limits=limits)
    )
    ctx = worker_context()
    if ctx is not None and getattr(type(server), "routes_sessions_to_owner", True):
        stack.append(
            Middleware(SessionOwnershipMiddleware, server=server, state_dir=ctx["dir"], kinds=kinds, cookie=cookie)
        )
    return [
        *stack,
        Middleware(SessionMiddleware, cookie=cookie, server=server, kinds=kinds),
        Middleware(CrashMiddleware, server_name=name, traces=server.error_traces),
        Middleware(PlainDispatch, kinds=kinds),
    ]


@contextlib.asynccontextmanager
async def on_stop(*closers: Callable[[], Any]) -> AsyncIterator[None]:
    """A lifespan part that calls ``closers`` in order as the server stops (awaiting what they return)."""
    try:
        yield
    finally:
        for close in closers:
            result = close()
            if inspect.isawaitable(result):
                await result


def _handlers(name: str) -> dict:
    """The error handlers: every error body names the server, the route and the cause."""

    async def invalid(request: Request, exc: RequestValidationError):
        errors = exc.errors()
        route = f"{request.method} {request.url.path}"
        # FastAPI files a body's errors under "body": the message names the fields inside it
        located = [
            {**e, "loc": e["loc"][1:]} if len(e.get("loc", ())) > 1 and e["loc"][0] == "body" else e for e in errors
        ]
        message = f"invalid request: {describe_validation(located, 'body')}"
        body = error_body(name, route, message, hint="fix the named fields and send the request again")
        body["message"] = body["detail"]
        body["detail"] = _jsonable(errors)
        return JSONResponse(status_code=422, content=body)

    async def session_refused(request: Request, exc: ResourcesSessionError):
        kind, message = getattr(exc, "failure_kind", None), str(exc)
        if exc.status_code >= 500:  # a release hook's own error: no file paths in the body (the log has them)
            message = without_paths(message)
        failure = (
            Failure(kind=kind, stage="cleanup", server=name, status=exc.status_code, message=message) if kind else None
        )
        return error_response(name, request.scope, exc.status_code, message, error=type(exc).__name__, failure=failure)

    async def http(request: Request, exc: StarletteHTTPException):
        cause = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
        if exc.status_code == 400 and exc.detail == "There was an error parsing the body":
            cause = "the body is not JSON this server can parse (malformed, or nested too deeply)"
        # ``detail``: what the route raised, as it raised it
        return error_response(name, request.scope, exc.status_code, cause, exc.headers, detail=exc.detail)

    return {RequestValidationError: invalid, ResourcesSessionError: session_refused, StarletteHTTPException: http}


class CrashMiddleware:
    """Turn an uncaught exception into a JSON 500 naming server, route and error; log the traceback."""

    def __init__(self, app, server_name: str, traces: bool = False):
        self.app, self.server_name, self.traces = app, server_name, traces

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = False

        async def tracking_send(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, tracking_send)
        except Exception as exc:
            route = f"{scope['method']} {scope['path']}"
            log.error("%s: %s raised", self.server_name, route, exc_info=exc)
            if started:
                raise
            extra = {"trace": without_paths("".join(traceback.format_exception(exc)))} if self.traces else {}
            message = without_paths(f"raised {cause_line(exc)}")  # no file paths in a body; the log has them
            hint = "the traceback is in the server's log"
            answer = error_response(self.server_name, scope, 500, message, error=type(exc).__name__, hint=hint, **extra)
            await answer(scope, receive, send)


def _jsonable(errors: list[dict]) -> list[dict]:
    out = []
    for e in errors:
        e = {k: v for k, v in e.items() if k not in ("ctx", "url")}
        if "input" in e:
            try:
                json.dumps(e["input"], allow_nan=False)
            except (TypeError, ValueError, RecursionError):
                e["input"] = repr(e["input"])[:200]
        out.append(e)
    return out
