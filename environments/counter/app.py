"""A stateful seed/verify environment: a counter per session, graded on its final value."""

from __future__ import annotations

import json
import re
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel, Field

from gymlab import (
    SESSION_ID_KEY,
    BaseSeedSessionRequest,
    BaseSeedSessionResponse,
    BaseVerifyRequest,
    BaseVerifyResponse,
    SimpleResourcesServer,
    function_call,
)


class CounterSeedRequest(BaseSeedSessionRequest):
    initial_count: int = 0


class IncrementRequest(BaseModel):
    by: int = 1


class CounterVerifyRequest(BaseVerifyRequest):
    target: int


class CounterVerifyResponse(BaseVerifyResponse):
    target: int
    final_count: int | None = None


class CounterServer(SimpleResourcesServer):
    session_state: dict[str, Any] = Field(default_factory=dict)

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/increment")(self.increment)
        return app

    async def seed_session(self, request: Request, body: CounterSeedRequest) -> BaseSeedSessionResponse:
        self.session_state[request.session[SESSION_ID_KEY]] = {"count": body.initial_count}
        return BaseSeedSessionResponse()

    async def increment(self, request: Request, body: IncrementRequest) -> dict:
        state = self.session_state.get(request.session[SESSION_ID_KEY])
        if state is None:
            raise HTTPException(404, "no counter for this session; call /seed_session first")
        state["count"] += body.by
        return {"count": state["count"]}

    async def verify(self, request: Request, body: CounterVerifyRequest) -> CounterVerifyResponse:
        session_id = request.session[SESSION_ID_KEY]
        try:
            final = self.session_state[session_id]["count"]
            return CounterVerifyResponse(
                **body.model_dump(), reward=float(final == body.target), final_count=final
            )
        finally:
            self.session_state.pop(session_id, None)


def policy(request):
    """Rule-based model: increment by one until the last tool output shows the target."""
    items = request.input_items()
    text = " ".join(i.text for i in items if i.type == "message" and i.role == "user")
    start, target = (int(n) for n in re.findall(r"-?\d+", text)[:2])
    count = start
    outputs = [i for i in items if i.type == "function_call_output"]
    if outputs:
        count = json.loads(outputs[-1].output).get("count", count)
    if count < target:
        return [function_call("increment", {"by": 1})]
    return f"The counter reads {count}."


if __name__ == "__main__":
    CounterServer.run_webserver()
