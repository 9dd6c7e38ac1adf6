"""``environment``: a ``SimpleResourcesServer`` subclass from plain functions (docs/servers.md)."""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Iterable
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from gymlab.errors import ResourcesSeedRejectedError
from gymlab.loop import RESERVED_ROUTES
from gymlab.protocol import (
    SESSION_ID_KEY,
    BaseSeedSessionRequest,
    BaseSeedSessionResponse,
    BaseVerifyRequest,
    BaseVerifyResponse,
    ResourcesSeedSessionRequest,
)
from gymlab.protocol.record import own_fields
from gymlab.resources.simple import SimpleResourcesServer, lost_session_verification
from gymlab.rewards.rubric import finite_reward, verify_answer

#: The names a verify function may take (any subset, by name).
VERIFY_PARAMETERS = ("row", "answer", "state", "response")


class RowSeed(BaseSeedSessionRequest, extra="allow"):
    """A seed body that keeps the row's fields."""


class RowVerify(BaseVerifyRequest, extra="allow"):
    """A verify body that keeps the row's fields."""


def row_of(body: BaseModel) -> dict[str, Any]:
    """The row's own fields in a seed or verify body (no request, response, identity or result)."""
    return own_fields(body.model_dump(mode="json"))


def arguments_model(fn: Callable[..., Any], env: str) -> tuple[type[BaseModel], bool]:
    """(the tool's arguments as a pydantic model, whether it takes ``state``) from ``fn``'s typed parameters."""
    try:
        hints = typing.get_type_hints(fn)
    except NameError as exc:
        raise TypeError(f"{fn.__qualname__}: an annotation does not resolve ({exc}); define its types first") from None
    parameters = inspect.signature(fn).parameters
    fields: dict[str, Any] = {}
    for p in parameters.values():
        if p.name == "state":
            continue
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"{env} tool {fn.__name__}: *{p.name} cannot be a tool argument; name each one")
        if p.name not in hints:
            raise TypeError(
                f"{env} tool {fn.__name__}: parameter {p.name!r} has no type; write `{p.name}: int` (or str, "
                "float, bool, list[str]...): the type is the argument's schema the model sees and is checked"
            )
        fields[p.name] = (hints[p.name], ... if p.default is p.empty else p.default)
    model = create_model(f"{fn.__name__}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
    return model, "state" in parameters


def _tool_route(fn: Callable[..., Any], model: type[BaseModel], wants_state: bool, env: str):
    """The route method for tool ``fn``: its arguments from the body, ``state`` from the episode."""

    async def route(self, request: Request, body: BaseModel) -> Any:
        kwargs = dict(body)
        if wants_state:
            state = self.session_state.get(request.session.get(SESSION_ID_KEY))
            if state is None:
                raise HTTPException(409, f"{env} /{fn.__name__}: no episode for this session; call /seed_session first")
            kwargs["state"] = state
        return await self.call_hook(fn, **kwargs)  # a sync tool in a thread, within work_budget_seconds

    route.__name__ = route.__qualname__ = fn.__name__
    route.__doc__ = inspect.getdoc(fn) or f"The {fn.__name__} tool."
    route.__annotations__ = {"request": Request, "body": model, "return": Any}
    return route


def environment(
    name: str,
    *,
    verify: Callable[..., Any],
    tools: Iterable[Callable[..., Any]] = (),
    fields: dict[str, Any] | None = None,
    reward_range: tuple[float, float] | None = None,
) -> type[SimpleResourcesServer]:
    """A ``SimpleResourcesServer`` subclass ``name``: a route per tool, ``verify(row, answer)`` the reward;
    ``fields``: row fields required, by type; ``reward_range``: the rewards an episode can earn."""
    tools = list(tools)
    params = set(inspect.signature(verify).parameters)
    if unknown := params - set(VERIFY_PARAMETERS):
        raise TypeError(
            f"{name} verify takes {', '.join(sorted(unknown))}; it may take {', '.join(VERIFY_PARAMETERS)} "
            "(the row's fields, the final answer's text, the episode's state, the whole response)"
        )
    declared: dict[str, Any] = {k: (t, ...) for k, t in (fields or {}).items()}
    seed_model = create_model(f"{name}Seed", __base__=RowSeed, **declared)
    verify_model = create_model(f"{name}Verify", __base__=RowVerify, **declared)
    namespace: dict[str, Any] = {"__doc__": f"{name}: an environment of plain functions (gymlab.environment)."}
    routes: list[str] = []
    for fn in tools:
        if fn.__name__ in RESERVED_ROUTES or fn.__name__ in namespace or not fn.__name__.isidentifier():
            raise ValueError(f"{name}: a tool cannot be named {fn.__name__!r} (taken, or a lifecycle route)")
        model, wants_state = arguments_model(fn, name)
        namespace[f"tool_{fn.__name__}"] = _tool_route(fn, model, wants_state, name)
        routes.append(fn.__name__)

    def setup_webserver(self) -> FastAPI:
        app = SimpleResourcesServer.setup_webserver(self)
        for tool in routes:
            app.post(f"/{tool}")(getattr(self, f"tool_{tool}"))
        return app

    async def seed_session(self, request: Request, body: BaseModel) -> BaseSeedSessionResponse:
        if isinstance(body, ResourcesSeedSessionRequest):  # the episode form: the row is its task_data
            try:
                row = row_of(seed_model.model_validate(body.task_data))
            except ValidationError as exc:
                raise ResourcesSeedRejectedError(f"{name}: invalid task_data: {exc.errors()[0]['msg']}") from None
            self.session_state[body.resources_session_id] = row
        else:
            self.session_state[request.session[SESSION_ID_KEY]] = row_of(body)
        return BaseSeedSessionResponse()

    async def verify_route(self, request: Request, body: RowVerify) -> BaseVerifyResponse:
        state = self.session_state.get(request.session.get(SESSION_ID_KEY))
        if state is None:
            return lost_session_verification(body, reason=f"{name} holds no episode for this session")
        given = {"row": row_of(body), "answer": body.response.output_text, "state": state, "response": body.response}
        result = await self.call_hook(verify, **{k: v for k, v in given.items() if k in params})
        if isinstance(result, BaseVerifyResponse):
            return result
        return verify_answer(body, {"reward": finite_reward(result, f"{name} verify")})

    seed_session.__annotations__ = {
        "request": Request,
        "body": ResourcesSeedSessionRequest | seed_model,
        "return": BaseSeedSessionResponse,
    }
    verify_route.__annotations__ = {"request": Request, "body": verify_model, "return": BaseVerifyResponse}
    verify_route.__name__ = "verify"
    namespace.update(setup_webserver=setup_webserver, seed_session=seed_session, verify=verify_route)
    namespace["reward_range"] = reward_range
    namespace["__annotations__"] = {}
    return type(name, (SimpleResourcesServer,), namespace)


__all__ = ["environment"]
