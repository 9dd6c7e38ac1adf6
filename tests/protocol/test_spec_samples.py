"""The spec's code samples, as written; only the import lines changed to gymlab."""

import json
from typing import Any

from fastapi import FastAPI, Request
from pydantic import BaseModel, Field

from gymlab import (
    SESSION_ID_KEY,
    BaseSeedSessionResponse,
    BaseVerifyRequest,
    BaseVerifyResponse,
    SimpleResourcesServer,
    function_call,
)


# --- "Direct HTTP Tool-Calling Protocol" and "Minimal Seed/Verify Environment" ---
class SquareRequest(BaseModel):
    value: int


class SquareResponse(BaseModel):
    result: int


class CalculatorServer(SimpleResourcesServer):
    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/square")(self.square)
        return app

    async def square(self, body: SquareRequest) -> SquareResponse:
        return SquareResponse(result=body.value**2)

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        used_square = any(item.type == "function_call" and item.name == "square" for item in body.response.output)
        return BaseVerifyResponse(
            responses_create_params=body.responses_create_params,
            response=body.response,
            reward=float(used_square),
        )


# --- "Seed/Verify State": the helpers the spec leaves to the reader, in one module ---
from tests.wire.spec_sample_helpers import SeedRequest, VerifyRequest, grade, initialize, make_verify_response  # noqa: E402


class StatefulServer(SimpleResourcesServer):
    session_state: dict[str, Any] = Field(default_factory=dict)

    async def seed_session(self, request: Request, body: SeedRequest):
        session_id = request.session[SESSION_ID_KEY]
        self.session_state[session_id] = initialize(body)
        return BaseSeedSessionResponse()

    async def verify(self, request: Request, body: VerifyRequest):
        session_id = request.session[SESSION_ID_KEY]
        try:
            reward = grade(self.session_state[session_id], body)
            return make_verify_response(body, reward)
        finally:
            self.session_state.pop(session_id, None)


def test_tool_route_example_answers_square(lab):
    env = lab.serve(CalculatorServer)
    assert env.post("/square", {"value": 4}) == {"result": 16}


def test_minimal_environment_end_to_end(lab, rows):
    from gymlab.examples import load_environment

    env = lab.serve(CalculatorServer)
    model = lab.serve_model(load_environment("calculator").policy)
    agent = lab.serve_agent("simple_agent", resources=env, model=model)
    rollout = agent.run(rows("calculator")[1])
    assert rollout.reward == 1.0
    outputs = [i for i in rollout.response.output if i.type == "function_call_output"]
    assert json.loads(outputs[0].output) == {"result": 49}


def test_stateful_server_pattern(lab):
    env = lab.serve(StatefulServer)

    def policy(request):
        return f"The secret is {request.input_items()[0].text.split()[-1]}"

    model = lab.serve_model(policy)
    agent = lab.serve_agent("simple_agent", resources=env, model=model)

    def row(shown, secret):
        return {"responses_create_params": {"input": f"Repeat the secret {shown}"}, "secret": secret}

    results = lab.run_many(
        agent, [row(i, i) if i % 2 else row(i, -i - 1) for i in range(40)], concurrency=40, on_error="raise"
    )
    assert [r.reward for r in results] == [0.0 if i % 2 == 0 else 1.0 for i in range(40)]
    assert env.server.session_state == {}


def test_scripted_policy_helpers_round_trip():
    call = function_call("square", {"value": 4}, call_id="call_123")
    assert call.model_dump(exclude_none=True) == {
        "type": "function_call",
        "name": "square",
        "arguments": '{"value": 4}',
        "call_id": "call_123",
        "id": call.id,
        "status": "completed",
    }


def test_declared_fields_kept_undeclared_dropped():
    params = {"input": "hi"}
    response = {"output": []}
    body = VerifyRequest.model_validate(
        {"responses_create_params": params, "response": response, "secret": 7, "category": "x"}
    )
    assert body.secret == 7
    assert "category" not in body.model_dump()
