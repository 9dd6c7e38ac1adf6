"""The spec's calculator: one tool, ``/square``; reward 1.0 when the model squared the question's number.

The spec's verify paid for any call of ``square`` (``gymlab probe`` flags it: calling every tool with
``{"value": 0}`` earned 1.0), so this one checks the call's argument against the question.
"""

from __future__ import annotations

import json
import re

from fastapi import FastAPI
from pydantic import BaseModel

from gymlab import BaseVerifyRequest, BaseVerifyResponse, SimpleResourcesServer, function_call


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
        """Square an integer."""
        return SquareResponse(result=body.value**2)

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        asked = asked_number(body.responses_create_params)
        squared = any(
            item.type == "function_call" and item.name == "square" and _value(item.arguments) == asked
            for item in body.response.output
        )
        return BaseVerifyResponse(
            responses_create_params=body.responses_create_params,
            response=body.response,
            reward=float(asked is not None and squared),
        )


def asked_number(params) -> int | None:
    """The last number of the user's messages: the one the question asks to square."""
    text = " ".join(i.text for i in params.input_items() if i.type == "message" and i.role == "user")
    numbers = re.findall(r"-?\d+", text)
    return int(numbers[-1]) if numbers else None


def _value(arguments: str):
    try:
        return json.loads(arguments).get("value")
    except (ValueError, AttributeError):
        return None


def policy(request):
    """Rule-based model: square the first number in the user's message, then report the result."""
    items = request.input_items()
    last = items[-1] if items else None
    if last is not None and last.type == "function_call_output":
        try:
            result = json.loads(last.output).get("result")
        except (ValueError, AttributeError):
            return f"The tool failed: {last.output}"
        return f"The answer is {result}."
    text = " ".join(i.text for i in items if i.type == "message" and i.role == "user")
    numbers = re.findall(r"-?\d+", text)
    if numbers and any(t.name == "square" for t in request.tools):
        return [function_call("square", {"value": int(numbers[-1])})]
    return "I cannot help with that."


from gymlab.utils import is_gymlab_fastapi_entrypoint  # noqa: E402

if __name__ == "__main__":
    CalculatorServer.run_webserver()
elif is_gymlab_fastapi_entrypoint(__file__):
    # With num_workers > 1, uvicorn imports this module in each worker and serves its module-level `app`.
    app = CalculatorServer.run_webserver()  # noqa: F401
