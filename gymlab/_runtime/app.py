"""Build a server's FastAPI app: the whole middleware and error stack in one function."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.middleware.sessions import SessionMiddleware

from gymlab._runtime.sessions import SessionIdMiddleware

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

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        body = {"detail": exc.detail, "server": name, "route": f"{request.method} {request.url.path}"}
        return JSONResponse(status_code=exc.status_code, content=body, headers=exc.headers)

    @app.exception_handler(Exception)
    async def _crash(request: Request, exc: Exception):
        route = f"{request.method} {request.url.path}"
        log.error("%s: %s raised", name, route, exc_info=exc)
        return JSONResponse(
            status_code=500,
            content={
                "detail": f"{name}: {route} raised {type(exc).__name__}: {exc}",
                "server": name,
                "route": route,
                "error": type(exc).__name__,
                "message": str(exc),
                "hint": "the traceback is in the server's log",
            },
        )

    @app.get("/health")
    async def health() -> dict:
        return {"status": "ok", "server": name}

    # Added last = outermost: the cookie is decoded before the id is assigned.
    app.add_middleware(SessionIdMiddleware)
    app.add_middleware(
        SessionMiddleware,
        secret_key=server.session_secret.get_secret_value(),
        session_cookie=f"gymlab_{_cookie_safe(name)}",
        same_site="lax",
    )
    return app


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
