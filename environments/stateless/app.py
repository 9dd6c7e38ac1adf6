"""A stateless seed/verify environment: graded from the response and the row alone.

It keeps nothing per session, so with several workers any worker can answer any request:
``routes_sessions_to_owner = False`` opts it out of session ownership routing (no table, no forwarding).
"""

from __future__ import annotations

import json
import re

from fastapi import FastAPI
from pydantic import BaseModel

from gymlab import BaseVerifyRequest, BaseVerifyResponse, SimpleResourcesServer, function_call


class ReverseRequest(BaseModel):
    text: str


class ReverseVerifyRequest(BaseVerifyRequest):
    expected: str


class ReverseVerifyResponse(BaseVerifyResponse):
    expected: str


class ReverseServer(SimpleResourcesServer):
    routes_sessions_to_owner = False

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/reverse")(self.reverse)
        return app

    async def reverse(self, body: ReverseRequest) -> dict:
        """Reverse a string."""
        return {"result": body.text[::-1]}

    async def verify(self, body: ReverseVerifyRequest) -> ReverseVerifyResponse:
        answered = body.response.output_text.strip()
        return ReverseVerifyResponse(**body.model_dump(), reward=float(answered == body.expected))


def policy(request):
    """Rule-based model: reverse the quoted word with the tool, then answer with the tool's result."""
    items = request.input_items()
    if items and items[-1].type == "function_call_output":
        return json.loads(items[-1].output).get("result", "")
    text = " ".join(i.text for i in items if i.type == "message" and i.role == "user")
    words = re.findall(r"'([^']*)'", text)
    return [function_call("reverse", {"text": words[0]})] if words else "Which word?"


from gymlab.utils import is_gymlab_fastapi_entrypoint  # noqa: E402

if __name__ == "__main__":
    ReverseServer.run_webserver()
elif is_gymlab_fastapi_entrypoint(__file__):
    # With num_workers > 1, uvicorn imports this module in each worker and serves its module-level `app`.
    app = ReverseServer.run_webserver()  # noqa: F401
