"""Plain JSON routes (``_runtime/plain.py``) answer exactly as FastAPI's own route class does: same
status, body, content type and cookie, for good input, bad, malformed, nested and foreign input,
refusals and crashes; other route shapes are left to FastAPI."""

from __future__ import annotations

import json

import httpx
import pytest
from fastapi import FastAPI, HTTPException, Request
from fastapi.routing import APIRoute
from pydantic import BaseModel

import gymlab._runtime.app as app_module
from gymlab import BaseVerifyRequest, BaseVerifyResponse, SimpleResourcesServer
from gymlab._runtime.plain import PlainRoute, _plan
from gymlab.examples import example_rows


class Value(BaseModel):
    value: int


class Maybe(BaseModel):
    value: int
    note: str | None = None


class Refused(Exception):
    pass


class Probe(SimpleResourcesServer):
    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/square")(self.square)
        app.post("/maybe", response_model_exclude_none=True)(self.maybe)
        app.post("/plain")(self.plain)
        app.post("/refuse")(self.refuse)
        app.post("/typed")(self.typed)
        app.post("/boom")(self.boom)
        app.post("/sees")(self.sees)
        app.post("/query")(self.query)

        async def refused(request: Request, exc: Refused):
            from fastapi.responses import JSONResponse

            return JSONResponse({"refused": str(exc)}, status_code=418)

        app.exception_handler(Refused)(refused)
        return app

    async def square(self, body: Value) -> Value:
        return Value(value=body.value**2)

    async def maybe(self, body: Value) -> Maybe:
        return Maybe(value=body.value)

    async def plain(self, body: Value):
        return {"value": body.value, "list": [1, 2]}

    async def refuse(self, body: Value) -> Value:
        raise HTTPException(409, f"value {body.value} is taken")

    async def typed(self, body: Value) -> Value:
        raise Refused(str(body.value))

    async def boom(self, body: Value) -> Value:
        raise RuntimeError("broken tool")

    async def sees(self, request: Request, body: Value) -> dict:
        return {"session": bool(request.session), "value": body.value, "json": await request.json()}

    async def query(self, body: Value, times: int = 1) -> Value:
        return Value(value=body.value * times)

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=1.0)


def _fastapis_own(server: Probe, monkeypatch) -> Probe:
    """``server`` with every route FastAPI's own ``APIRoute`` (what this file compares with)."""
    with monkeypatch.context() as m:
        m.setattr(app_module, "PlainRoute", APIRoute)
        routes = [r for r in server.app.router.routes if hasattr(r, "endpoint")]
    assert routes and not any(isinstance(r, PlainRoute) for r in routes)
    return server


NESTED = b'{"value": ' + b"[" * 5000 + b"]" * 5000 + b"}"


REQUESTS = [
    ("/square", {"json": {"value": 3}}),
    ("/square", {"json": {"value": "three"}}),
    ("/square", {"json": {"value": 3, "extra": 1}}),
    ("/square", {"json": [1, 2]}),
    ("/square", {"content": b'{"value": 3', "headers": {"content-type": "application/json"}}),
    ("/square", {"content": b'{"value": 3}', "headers": {"content-type": "text/plain"}}),
    ("/square", {"content": b'{"value": 3}'}),
    ("/square", {"content": b"", "headers": {"content-type": "application/json"}}),
    ("/square", {"content": NESTED, "headers": {"content-type": "application/json"}}),
    ("/square", {"content": b'{"value": 3}', "headers": {"content-type": "application/vnd.foreign+json"}}),
    ("/square", {"json": {"value": 10**30}}),
    ("/square", {"json": "value"}),
    ("/maybe", {"json": {"value": 2}}),
    ("/plain", {"json": {"value": 2}}),
    ("/refuse", {"json": {"value": 5}}),
    ("/typed", {"json": {"value": 6}}),
    ("/boom", {"json": {"value": 7}}),
    ("/sees", {"json": {"value": 8}}),
    ("/query?times=3", {"json": {"value": 2}}),
    ("/verify", {"json": {**example_rows("calculator")[0], "response": {"output": []}}}),
    ("/verify", {"json": {"response": {"output": []}}}),
    ("/seed_session", {"json": example_rows("calculator")[0]}),
    ("/seed_session", {"json": {"resources_session_id": "s-1", "episode_id": "e-1"}}),
]


def _answer(reply: httpx.Response) -> tuple:
    cookie = reply.headers.get("set-cookie")
    body = reply.text.replace("probe_plain", "probe")  # error bodies name their own server
    try:
        body = json.loads(body)
    except ValueError:
        pass
    if isinstance(body, dict):
        body.pop("trace", None)  # a Lab server's crash trace: its frames differ by path, by design
    if isinstance(body, dict) and isinstance(body.get("response"), dict):
        body["response"].pop("id", None)  # a fresh random id in each answer
    return reply.status_code, reply.headers.get("content-type"), body, cookie is not None


@pytest.mark.parametrize("path, kwargs", REQUESTS, ids=[f"{p}-{i}" for i, (p, _) in enumerate(REQUESTS)])
def test_a_plain_answer_is_fastapis_answer(lab, path, kwargs, monkeypatch):
    plain = lab.serve(Probe(name="probe"))
    fastapi = lab.serve(_fastapis_own(Probe(name="probe_plain"), monkeypatch))
    with httpx.Client(timeout=60) as client:
        got = _answer(client.post(plain.url + path, **kwargs))
        want = _answer(client.post(fastapi.url + path, **kwargs))
    assert got == want


def test_plain_json_routes_are_planned_and_others_are_not():
    app = Probe().app
    routes = {r.path: r for r in app.router.routes if isinstance(r, PlainRoute)}
    for path in ("/square", "/maybe", "/plain", "/sees", "/verify", "/seed_session", "/close_session"):
        assert _plan(routes[path]) is not None and routes[path].plain is not None, path
    assert _plan(routes["/query"]) is None  # a query parameter: FastAPI's way
    assert _plan(routes["/health"]) is None and routes["/health"].plain is None  # no body


def test_a_crash_is_a_json_500_naming_server_and_route(lab):
    probe = lab.serve(Probe(name="probe"))
    reply = httpx.post(probe.url + "/boom", json={"value": 1}, timeout=60)
    assert reply.status_code == 500
    assert reply.json()["server"] == "probe" and reply.json()["route"] == "POST /boom"
    assert "broken tool" in reply.json()["detail"]


def test_concurrent_plain_requests_each_get_their_own_answer(lab):
    import asyncio

    import aiohttp

    probe = lab.serve(Probe(name="probe"))

    async def run():
        async with aiohttp.ClientSession() as s:

            async def one(i):
                async with s.post(probe.url + "/square", json={"value": i}) as r:
                    return (await r.json())["value"]

            return await asyncio.gather(*(one(i) for i in range(200)))

    from gymlab._sync import run_sync

    assert run_sync(run()) == [i * i for i in range(200)]
