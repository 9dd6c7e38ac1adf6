"""``DirectRoutes``: a plain JSON route answered without FastAPI's per-request machinery.

For a coroutine handler taking one JSON body (and optionally the ``Request``) and no dependencies, the
innermost middleware validates, calls and serialises with FastAPI's own pieces; anything else, or a
body that does not validate, goes the ordinary way before the handler runs. It reads FastAPI's
internals, so it runs only under ``FASTAPI_RANGE`` and ``GYMLAB_DIRECT_ROUTES=0`` turns it off (docs/runtime.md).
"""

from __future__ import annotations

import inspect
import os
import re
from typing import Any

from fastapi import params
from fastapi.datastructures import DefaultPlaceholder
from fastapi.encoders import jsonable_encoder
from fastapi.routing import APIRoute
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gymlab._runtime.bodies import BODY_KEY, PARSED_KEY, parse_json

_UNSET = object()
#: The first and last FastAPI minor releases this module is tested with (see the module docstring).
FASTAPI_RANGE = ((0, 133), (0, 165))
FLAG = "GYMLAB_DIRECT_ROUTES"
#: The route's ``response_model_*`` settings its answer is serialised with, as FastAPI does.
_DUMP_OPTIONS = ("include", "exclude", "by_alias", "exclude_unset", "exclude_defaults", "exclude_none")
#: What a handler may not take to be answered directly: dependencies, parameters besides its body.
_NOT_PLAIN = (
    "dependencies path_params query_params header_params cookie_params http_connection_param_name "
    "websocket_param_name response_param_name background_tasks_param_name security_scopes_param_name"
).split()


def direct_enabled() -> bool:
    """Whether plain JSON routes are answered directly: under ``FASTAPI_RANGE``, unless ``FLAG`` is 0."""
    import fastapi

    found = re.match(r"(\d+)\.(\d+)", fastapi.__version__)
    minor = (int(found[1]), int(found[2])) if found else (0, 0)
    return os.environ.get(FLAG, "1") != "0" and FASTAPI_RANGE[0] <= minor <= FASTAPI_RANGE[1]


class _Plan:
    """How to answer one route directly."""

    __slots__ = ("route", "call", "body_name", "request_name", "field", "dump_json", "status", "options")

    def __init__(self, route: APIRoute, field: Any, request_name: str | None):
        self.route, self.call = route, route.dependant.call
        self.body_name, self.request_name, self.field = field.name, request_name, field
        self.status = {"status_code": route.status_code} if route.status_code else {}
        self.options = {name: getattr(route, f"response_model_{name}") for name in _DUMP_OPTIONS}
        # FastAPI's own rule: JSON bytes straight from the response field unless a class was chosen.
        self.dump_json = (
            route.response_field is not None
            and isinstance(route.response_class, DefaultPlaceholder)
            and hasattr(route.response_field, "serialize_json")
        )


def plan_for(route: Any) -> _Plan | None:
    """The plan for ``route``, or None when it must go through FastAPI."""
    if not isinstance(route, APIRoute) or route.param_convertors or route.body_field is None:
        return None
    d = route.dependant
    if any(getattr(d, name) for name in _NOT_PLAIN) or len(d.body_params) != 1 or not _is_coroutine(d.call):
        return None
    body = d.body_params[0]
    if getattr(route, "_embed_body_fields", False) or getattr(body.field_info, "embed", False):
        return None  # an embedded body: {"name": ...}
    if isinstance(body.field_info, params.Form):
        return None
    status = route.status_code
    if status is not None and (status < 200 or status in (204, 304)):
        return None
    response_class = getattr(route.response_class, "value", route.response_class)
    if not (isinstance(response_class, type) and issubclass(response_class, JSONResponse)):
        return None
    return _Plan(route, body, d.request_param_name)


def _is_coroutine(call: Any) -> bool:
    if inspect.isroutine(call):
        return inspect.iscoroutinefunction(call)
    return inspect.iscoroutinefunction(getattr(call, "__call__", None))  # noqa: B004


def _json_content_type(headers: list[tuple[bytes, bytes]]) -> bool:
    for key, value in headers:
        if key == b"content-type":
            kind = value.split(b";")[0].strip().lower()
            return kind == b"application/json" or (kind.startswith(b"application/") and kind.endswith(b"+json"))
    return False


class DirectRoutes:
    """Innermost app middleware: answer plain JSON routes directly (see the module docstring)."""

    def __init__(self, app, fastapi_app):
        self.app, self.fastapi_app = app, fastapi_app
        self._plans: dict[tuple[str, str], _Plan | None] = {}

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or BODY_KEY not in scope or self.fastapi_app.dependency_overrides:
            return await self.app(scope, receive, send)
        key = (scope["method"], scope["path"])
        plan = self._plans.get(key, _UNSET)
        if plan is _UNSET:
            plan = self._plan(scope)
        body = scope[BODY_KEY]
        if plan is None or not body or not _json_content_type(scope["headers"]):
            return await self.app(scope, receive, send)
        parsed = scope.get(PARSED_KEY)
        if parsed is not None and parsed[0] is body:
            data = parsed[1]
        else:
            try:
                data = parse_json(body)
            except (ValueError, RecursionError):
                return await self.app(scope, receive, send)  # FastAPI answers the parse error
        value, errors = plan.field.validate(data, {}, loc=("body",))
        if errors:
            return await self.app(scope, receive, send)  # FastAPI answers the 422
        route = plan.route
        scope["route"], scope["endpoint"], scope["path_params"] = route, route.endpoint, {}
        scope.setdefault("router", self.fastapi_app.router)
        request = Request(scope, receive, send)
        request._body, request._json = body, data  # what a handler reads is not read or parsed again
        kwargs = {plan.body_name: value}
        if plan.request_name:
            kwargs[plan.request_name] = request
        try:
            result = await plan.call(**kwargs)
            response = result if isinstance(result, Response) else await self._render(plan, result)
        except Exception as exc:
            handler = self._handler_for(exc)
            if handler is None:
                raise
            response = handler(request, exc)
            if inspect.isawaitable(response):
                response = await response
        await response(scope, receive, send)

    def _plan(self, scope) -> _Plan | None:
        from starlette.routing import Match

        plan = None
        for route in self.fastapi_app.router.routes:
            match, _ = route.matches(scope)
            if match == Match.FULL:
                plan = plan_for(route)
                break
        if len(self._plans) < 4096:
            self._plans[(scope["method"], scope["path"])] = plan
        return plan

    async def _render(self, plan: _Plan, result: Any) -> Response:
        route, status = plan.route, plan.status
        response_class = getattr(route.response_class, "value", route.response_class)
        field = route.response_field
        if field is None:
            return response_class(jsonable_encoder(result), **status)
        value, errors = field.validate(result, {}, loc=("response",))
        if errors:  # FastAPI raises its own ResponseValidationError for it
            from fastapi.routing import serialize_response

            await serialize_response(field=field, response_content=result)
        if plan.dump_json:
            return Response(field.serialize_json(value, **plan.options), media_type="application/json", **status)
        return response_class(field.serialize(value, **plan.options), **status)

    def _handler_for(self, exc: Exception):
        handlers = self.fastapi_app.exception_handlers
        status = getattr(exc, "status_code", None)
        from starlette.exceptions import HTTPException

        if isinstance(exc, HTTPException) and status in handlers:
            return handlers[status]
        for cls in type(exc).__mro__:
            if cls in handlers and cls is not Exception:
                return handlers[cls]
        return None
