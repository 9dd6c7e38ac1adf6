"""``PlainRoute``: a plain JSON route answered without FastAPI's per-request dependency machinery.

FastAPI's documented custom route class (``get_route_handler``): for a coroutine handler taking one
JSON body model (and optionally the ``Request``), with no path parameters, dependencies or response
options, the body is validated and the answer serialised with pydantic ``TypeAdapter``s, as FastAPI
does; a body that does not parse or validate goes to FastAPI's own handler before the route runs, so
every error answer is FastAPI's (docs/runtime.md).
"""

from __future__ import annotations

import inspect
import typing
from typing import Any

from fastapi import Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import ResponseValidationError
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, TypeAdapter, ValidationError

from gymlab._runtime.bodies import BODY_KEY, PARSED_KEY, is_json, parse_json

#: ``response_model_*`` settings a plain route leaves at FastAPI's defaults.
_DEFAULTS = {"include": None, "exclude": None, "by_alias": True, "exclude_unset": False}
_DEFAULTS.update(exclude_defaults=False, exclude_none=False)


class PlainRoute(APIRoute):
    """Every route of a gymlab app; the plain ones answered directly (see the module docstring)."""

    def get_route_handler(self) -> Any:
        handler = super().get_route_handler()
        plan = _plan(self)
        if plan is None:
            return handler
        body_name, body, request_name, answer = plan

        async def plain(request: Request) -> Response:
            raw = request.scope.get(BODY_KEY)
            if raw is None:
                raw = await request.body()
            # no declared JSON content type: FastAPI's way, whose rule for it varies by release
            if not raw or not is_json(_content_type(request.scope["headers"]), missing=False):
                return await handler(request)
            parsed = request.scope.get(PARSED_KEY)
            try:
                data = parsed[1] if parsed is not None and parsed[0] is raw else parse_json(raw)
                value = body.validate_python(data, from_attributes=True)
            except (ValueError, RecursionError):  # pydantic's ValidationError is a ValueError
                return await handler(request)  # FastAPI answers the 400 or 422
            kwargs = {body_name: value, **({request_name: request} if request_name else {})}
            result = await self.endpoint(**kwargs)
            return result if isinstance(result, Response) else _render(answer, result)

        return plain


def _content_type(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    return next((value for key, value in headers if key == b"content-type"), None)


def _plan(route: APIRoute) -> tuple[str, TypeAdapter, str | None, TypeAdapter | None] | None:
    """(body parameter, its adapter, Request parameter, the answer's adapter), or None: FastAPI's way."""
    endpoint = route.endpoint
    if not inspect.iscoroutinefunction(endpoint) or route.dependencies or "{" in route.path:
        return None
    response_class = getattr(route.response_class, "value", route.response_class)
    if route.status_code is not None or response_class is not JSONResponse:
        return None
    if any(getattr(route, f"response_model_{name}") != value for name, value in _DEFAULTS.items()):
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
    return body[0], body[1], request_name, answer


_UnionType = type(int | str)


def _models(kind: Any) -> bool:
    """Whether ``kind`` is a pydantic model or a union of them (FastAPI reads it as the whole body)."""
    members = typing.get_args(kind) if typing.get_origin(kind) in (typing.Union, _UnionType) else (kind,)
    return all(isinstance(m, type) and issubclass(m, BaseModel) for m in members)


def _render(answer: TypeAdapter | None, result: Any) -> Response:
    """The answer as FastAPI renders it: validated against the response model and dumped as JSON."""
    if answer is None:
        return JSONResponse(jsonable_encoder(result))
    try:
        value = answer.validate_python(result, from_attributes=True)
    except ValidationError as exc:
        errors = [{**e, "loc": ("response", *e["loc"])} for e in exc.errors(include_url=False)]
        raise ResponseValidationError(errors, body=result) from None
    return Response(answer.dump_json(value, by_alias=True), media_type="application/json")
