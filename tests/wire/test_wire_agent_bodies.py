"""gymlab's agents send ``responses_create_params`` fully dumped (all 30 fields, null when unset) in
``/seed_session``, ``/verify``, ``/reset`` and ``/step`` bodies, as the reference's agents do."""

from __future__ import annotations

from fastapi import Request

from gymlab import BaseVerifyRequest, BaseVerifyResponse, GymnasiumServer, SimpleResourcesServer
from gymlab.examples import example_rows, load_environment
from tests.wire.nemo_shapes import param_fields

BODIES: dict[str, list[dict]] = {}


class RecordingServer(SimpleResourcesServer):
    async def seed_session(self, request: Request, body: dict | None = None):
        BODIES.setdefault("/seed_session", []).append(await request.json())
        return {}

    async def verify(self, request: Request, body: BaseVerifyRequest) -> BaseVerifyResponse:
        BODIES.setdefault("/verify", []).append(await request.json())
        return BaseVerifyResponse(**body.model_dump(), reward=1.0)


class RecordingEnv(GymnasiumServer):
    async def reset(self, metadata, session_id=None):
        return None, {}

    async def step(self, action, metadata, session_id=None):
        return None, 1.0, True, False, {}


def check(body: dict) -> None:
    params = body["responses_create_params"]
    assert sorted(params) == sorted(param_fields())
    assert params["temperature"] is None and params["stream_options"] is None and params["tool_choice"] == "auto"


def test_simple_agent_sends_every_field(lab):
    BODIES.clear()
    calc = load_environment("calculator")
    agent = lab.serve_agent(resources=lab.serve(RecordingServer), model=lab.serve_model(calc.policy))
    assert agent.run(example_rows("calculator")[0]).reward == 1.0
    for route in ("/seed_session", "/verify"):
        check(BODIES[route][0])


def test_gymnasium_agent_sends_every_field(lab):
    seen: list[dict] = []
    env = RecordingEnv()
    app = env.app

    @app.middleware("http")
    async def record(request, call_next):
        if request.url.path in ("/reset", "/step"):
            seen.append(await request.json())
        return await call_next(request)

    gym = load_environment("calculator_gym")
    agent = lab.serve_agent("gymnasium_agent", resources=lab.serve(env), model=lab.serve_model(gym.policy))
    agent.run(example_rows("calculator_gym")[0])
    assert len(seen) >= 2
    for body in seen:
        check(body)
