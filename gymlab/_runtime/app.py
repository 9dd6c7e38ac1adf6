"""Build a server's FastAPI app: the whole middleware and error stack in one function."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.sessions import SessionMiddleware

from gymlab._runtime.ownership import install as install_ownership_routing
from gymlab._runtime.sessions import SessionIdMiddleware
from gymlab._runtime.workers import worker_context
from gymlab.errors import ResourcesSessionError

if TYPE_CHECKING:
    from gymlab.server import BaseServer

log = logging.getLogger("gymlab.server")


def _describe_validation(errors: list[dict]) -> str:
    parts = []
    for e in errors:
        path = list(e.get("loc", ()))
        if path[:1] == ["body"] and len(path) > 1:
            path = path[1:]
        loc = ".".join(str(p) for p in path)
        if e.get("type") == "extra_forbidden":
            parts.append(f"unknown key '{loc.rsplit('.', 1)[-1]}' in {loc.rsplit('.', 1)[0] or 'body'}")
        else:
            parts.append(f"{loc or 'body'}: {e.get('msg')}")
    return "; ".join(parts)


def build_app(server: "BaseServer") -> FastAPI:
    """The FastAPI app for ``server``: sessions, error bodies that name server and route, health."""
    app = FastAPI(title=f"gymlab {server.name}")
    name = server.name

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        errors = exc.errors()
        message = _describe_validation(errors)
        return JSONResponse(
            status_code=422,
            content={
                "detail": _jsonable(errors),
                "server": name,
                "route": f"{request.method} {request.url.path}",
                "message": f"{name}: {request.method} {request.url.path}: invalid request: {message}",
            },
        )

    @app.exception_handler(ResourcesSessionError)
    async def _session_refused(request: Request, exc: ResourcesSessionError):
        route = f"{request.method} {request.url.path}"
        body = {"detail": f"{name}: {route}: {exc}", "server": name, "route": route,
                "error": type(exc).__name__, "message": str(exc)}
        return JSONResponse(status_code=exc.status_code, content=body)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        body = {"detail": exc.detail, "server": name, "route": f"{request.method} {request.url.path}"}
        return JSONResponse(status_code=exc.status_code, content=body, headers=exc.headers)

    # Crashes are answered by an ASGI middleware, not an exception handler: Starlette re-raises after
    # its handler runs, and uvicorn then drops the keep-alive connection the client is about to reuse.
    app.add_middleware(CrashMiddleware, server_name=name)

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "server": name}

    # Added last = outermost: the cookie is decoded before the id is assigned.
    app.add_middleware(SessionIdMiddleware, server_name=name)
    app.add_middleware(
        SessionMiddleware,
        secret_key=server.session_secret.get_secret_value(),
        session_cookie=f"gymlab_{_cookie_safe(name)}",
        same_site="lax",
    )
    install_ownership_routing(app, server, worker_context())  # outermost; only in a worker of several
    return app


class CrashMiddleware:
    """Turn an uncaught exception into a JSON 500 naming server, route and error; log the traceback."""

    def __init__(self, app, server_name: str):
        self.app, self.server_name = app, server_name

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
            body = {
                "detail": f"{self.server_name}: {route} raised {type(exc).__name__}: {exc}",
                "server": self.server_name,
                "route": route,
                "error": type(exc).__name__,
                "message": str(exc),
                "hint": "the traceback is in the server's log",
            }
            await JSONResponse(status_code=500, content=body)(scope, receive, send)


def _cookie_safe(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)


def _jsonable(errors: list[dict]) -> list[dict]:
    out = []
    for e in errors:
        e = dict(e)
        e.pop("ctx", None)
        e.pop("url", None)
        if "input" in e:
            try:
                import json

                json.dumps(e["input"])
            except (TypeError, ValueError):
                e["input"] = repr(e["input"])[:200]
        out.append(e)
    return out
