"""A stateful seed/verify environment: a counter per session, graded on its final value.

It serves both episode forms: simple_agent's flat row (state keyed by the cookie's session id, released
in ``verify``) and an environment server's episode session (``ResourcesSeedSessionRequest``, state
keyed by ``resources_session_id``, released by ``close_resources_session``). A verify for a counter the
server no longer holds answers with the masked ``lost_session_verification``.
"""

from __future__ import annotations

import json
import re
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel, PrivateAttr, ValidationError

from gymlab import (
    SESSION_ID_KEY,
    BaseSeedSessionRequest,
    BaseSeedSessionResponse,
    BaseVerifyRequest,
    BaseVerifyResponse,
    ResourcesSeedRejectedError,
    ResourcesSeedSessionRequest,
    SimpleResourcesServer,
    function_call,
    lost_session_verification,
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
    """Per-session counters live in ``self.session_state``: process state, not config (a private
    attribute, so a YAML config cannot set it)."""

    _session_state: dict[str, Any] = PrivateAttr(default_factory=dict)

    @property
    def session_state(self) -> dict[str, Any]:
        return self._session_state

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/increment")(self.increment)
        return app

    async def seed_session(
        self, request: Request, body: ResourcesSeedSessionRequest | CounterSeedRequest
    ) -> BaseSeedSessionResponse:
        if isinstance(body, ResourcesSeedSessionRequest):
            try:
                task = CounterSeedRequest.model_validate(body.task_data)
            except ValidationError as exc:
                problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
                raise ResourcesSeedRejectedError(f"invalid task_data: {problems}") from None
            session_id = body.resources_session_id
        else:
            task, session_id = body, request.session[SESSION_ID_KEY]
        self.session_state[session_id] = {"count": task.initial_count}
        return BaseSeedSessionResponse()

    async def close_resources_session(self, resources_session_id: str) -> None:
        self.session_state.pop(resources_session_id, None)

    async def increment(self, request: Request, body: IncrementRequest) -> dict:
        """Add `by` to the counter and return the new count."""
        state = self.session_state.get(request.session[SESSION_ID_KEY])
        if state is None:
            raise HTTPException(404, "no counter for this session; call /seed_session first")
        state["count"] += body.by
        return {"count": state["count"]}

    async def verify(self, request: Request, body: CounterVerifyRequest) -> CounterVerifyResponse:
        state = self.session_state.pop(request.session[SESSION_ID_KEY], None)
        if state is None:
            return lost_session_verification(body, reason="no counter is held for this session")
        final = state["count"]
        return CounterVerifyResponse(**body.model_dump(), reward=float(final == body.target), final_count=final)


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


from gymlab.utils import is_gymlab_fastapi_entrypoint  # noqa: E402

if __name__ == "__main__":
    CounterServer.run_webserver()
elif is_gymlab_fastapi_entrypoint(__file__):
    # With num_workers > 1, uvicorn imports this module in each worker and serves its module-level `app`.
    app = CounterServer.run_webserver()  # noqa: F401
