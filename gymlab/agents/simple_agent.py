"""simple_agent: seed -> model/tool loop -> verify, with tools as HTTP routes of the resources server."""

from __future__ import annotations

import time
from typing import Any

from fastapi import FastAPI

from gymlab.agents.base import AgentRunRequest, BaseAgent, dump_row, upstream_failure
from gymlab.client import Cookies, post, post_ok
from gymlab.errors import ServerError
from gymlab.loop import LoopState, run_loop
from gymlab.protocol import NeMoGymResponse, ResponseCreateParams


class SimpleAgent(BaseAgent):
    """The built-in seed/verify agent. ``/run`` grades an episode; ``/v1/responses`` runs the loop."""

    resources_server: str = ""

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/run")(self.run)
        app.post("/v1/responses", response_model_exclude_none=True)(self.responses)
        return app

    def tool_caller(self, cookies: Cookies):
        """A ``call_tool`` for the loop: POST /{name} with the rollout's cookies; the body is the output."""

        async def call_tool(name: str, args: Any) -> str:
            return (await post(self.resources_server, f"/{name}", args, cookies, server="resources server")).text

        return call_tool

    async def loop(self, params: ResponseCreateParams, cookies: Cookies) -> LoopState:
        return await run_loop(params, self.call_model, self.tool_caller(cookies), self.max_steps)

    async def responses(self, body: ResponseCreateParams) -> NeMoGymResponse:
        """The agent loop as a Responses endpoint (tools dispatched to the resources server)."""
        try:
            return (await self.loop(body, Cookies())).final_response()
        except ServerError as exc:
            raise upstream_failure(self.name, exc) from exc

    async def run(self, body: AgentRunRequest) -> dict[str, Any]:
        """One graded episode: the verify response plus per-step records."""
        t0 = time.perf_counter()
        row = dump_row(body)
        cookies = Cookies()
        res = self.resources_server
        try:
            await post_ok(res, "/seed_session", row, cookies, server="resources server")
            state = await self.loop(body.responses_create_params, cookies)
            response = state.final_response()
            verify_body = {**row, "response": response.model_dump(mode="json", exclude_none=True)}
            result = await post_ok(res, "/verify", verify_body, cookies, server="resources server")
        except ServerError as exc:
            raise upstream_failure(self.name, exc) from exc
        if state.steps:
            state.steps[-1].reward = float(result.get("reward", 0.0))
            state.steps[-1].terminated = state.stop_reason == "final_message"
            state.steps[-1].truncated = state.stop_reason == "max_steps"
        result["steps"] = [s.model_dump(mode="json", exclude_none=True) for s in state.steps]
        result["duration_s"] = time.perf_counter() - t0
        return result
