"""Plain JSON routes (one JSON body model, maybe the ``Request``) answered without FastAPI's per-request
machinery, through its public API only; input that does not parse or validate goes FastAPI's way, so every
error answer is FastAPI's (docs/runtime.md)."""

from __future__ import annotations

import functools
import inspect
import typing
from typing import Any

from fastapi import Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import ResponseValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException

from gymlab._runtime.bodies import BODY_KEY, is_json, parsed_body

#: The route's ``response_model_*`` settings its answer is dumped with, as FastAPI does.
_OPTIONS = ("include", "exclude", "by_alias", "exclude_unset", "exclude_defaults", "exclude_none")


class PlainRoute(APIRoute):
    """Every route of a gymlab app; ``plain`` answers a plain one directly (see the module docstring)."""

    plain: Any = None

    def get_route_handler(self) -> Any:
        handler = super().get_route_handler()
        plan = _plan(self)
        if plan is None:
            return handler
        self.plain = functools.partial(_answer, self.endpoint, *plan)

        async def app(request: Request) -> Response:
            raw = request.scope.get(BODY_KEY)
            response = await self.plain(request, raw if raw is not None else await request.body())
            return response if response is not None else await handler(request)

        return app


class PlainDispatch:
    """Innermost middleware: a request to a plain route goes straight to its ``PlainRoute.plain`` (no route
    matching, request wrapping or exit stacks); its exceptions to the app's handlers, as Starlette's
    ``ExceptionMiddleware`` does; anything else, and input that is not plain, the ordinary way."""

    def __init__(self, app: Any, kinds: Any):
        self.app, self.kinds = app, kinds  # kinds: the app's ``RouteKinds``, which finds each request's route

    async def __call__(self, scope, receive, send):
        app, raw = scope.get("app"), scope.get(BODY_KEY)
        if scope["type"] != "http" or app is None or raw is None:
            return await self.app(scope, receive, send)
        route = self.kinds.route(scope)
        if not isinstance(route, PlainRoute) or route.plain is None:
            return await self.app(scope, receive, send)
        scope.update(route=route, endpoint=route.endpoint, path_params={})
        request = Request(scope, receive, send)
        try:
            response = await route.plain(request, raw)
            if response is None:  # not JSON, or not valid: FastAPI answers it, the body not yet read
                return await self.app(scope, receive, send)
        except Exception as exc:
            handler = _handler_for(app.exception_handlers, exc)
            if handler is None:
                raise
            response = handler(request, exc)
            if inspect.isawaitable(response):
                response = await response
        await response(scope, receive, send)


def _handler_for(handlers: dict, exc: Exception) -> Any:
    """The exception handler Starlette's ``ExceptionMiddleware`` would call (by status, then by class)."""
    if isinstance(exc, StarletteHTTPException) and exc.status_code in handlers:
        return handlers[exc.status_code]
    return next((handlers[c] for c in type(exc).__mro__ if c in handlers and c is not Exception), None)


async def _answer(endpoint, body_name, body, request_name, answer, request: Request, raw: bytes) -> Response | None:
    """The route's answer, or None when the body is not declared JSON, does not parse or does not validate."""
    if not raw or not is_json(_content_type(request.scope["headers"]), missing=False):
        return None  # no declared JSON content type: FastAPI's way, whose rule for it varies by release
    try:
        data = parsed_body(request.scope, raw)  # the route may read it too (a seed's form)
        value = body.validate_python(data, from_attributes=True)
    except (ValueError, RecursionError):  # pydantic's ValidationError is a ValueError
        return None
    result = await endpoint(**{body_name: value, **({request_name: request} if request_name else {})})
    return result if isinstance(result, Response) else _render(*answer, result)


def _content_type(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    return next((value for key, value in headers if key == b"content-type"), None)


def _plan(route: APIRoute) -> tuple[str, TypeAdapter, str | None, tuple] | None:
    """(body parameter, its adapter, Request parameter, the answer's adapter), or None: FastAPI's way."""
    endpoint = route.endpoint
    if not inspect.iscoroutinefunction(endpoint) or route.dependencies or "{" in route.path:
        return None
    response_class = getattr(route.response_class, "value", route.response_class)
    if route.status_code is not None or response_class is not JSONResponse:
        return None
    try:
        hints = typing.get_type_hints(endpoint)
    except Exception:  # an annotation only its own scope resolves: FastAPI's way
        return None
    body, request_name = None, None
    for p in inspect.signature(endpoint).parameters.values():
        kind = hints.get(p.name, p.annotation)
        if kind is Request and request_name is None:
            request_name = p.name
        elif body is None and p.default is p.empty and _models(kind):
            body = p.name, TypeAdapter(kind)
        else:
            return None
    if body is None:
        return None
    answer = TypeAdapter(route.response_model) if route.response_model is not None else None
    return body[0], body[1], request_name, (answer, {k: getattr(route, f"response_model_{k}") for k in _OPTIONS})


_UnionType = type(int | str)


def _models(kind: Any) -> bool:
    """Whether ``kind`` is a pydantic model or a union of them (FastAPI reads it as the whole body)."""
    members = typing.get_args(kind) if typing.get_origin(kind) in (typing.Union, _UnionType) else (kind,)
    return all(isinstance(m, type) and issubclass(m, BaseModel) for m in members)


def _render(answer: TypeAdapter | None, options: dict, result: Any) -> Response:
    """The answer as FastAPI renders it: validated against the response model and dumped as JSON."""
    if answer is None:
        return JSONResponse(jsonable_encoder(result))
    try:
        value = answer.validate_python(result, from_attributes=True)
    except ValidationError as exc:
        errors = [{**e, "loc": ("response", *e["loc"])} for e in exc.errors(include_url=False)]
        raise ResponseValidationError(errors, body=result) from None
    return Response(answer.dump_json(value, **options), media_type="application/json")
