"""simple_agent: seed -> model/tool loop -> verify, with tools as HTTP routes of the resources server."""

from __future__ import annotations

import time
from typing import Any

from fastapi import FastAPI, HTTPException, Request

from gymlab.agents.base import AgentRunRequest, BaseAgent, dump_row, session_lost, upstream_failure
from gymlab.client import Cookies, error_message, post, post_ok
from gymlab.errors import ServerError
from gymlab.loop import LoopState, run_loop
from gymlab.protocol import RESOURCES_COOKIE_HEADER, RESOURCES_SERVER_HEADER, NeMoGymResponse, ResponseCreateParams


class SimpleAgent(BaseAgent):
    """The built-in seed/verify agent. ``/run`` grades an episode; ``/v1/responses`` runs the loop."""

    resources_server: str = ""

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/run")(self.run)
        app.post("/v1/responses", response_model_exclude_none=True)(self.responses)
        return app

    def tool_caller(self, cookies: Cookies, resources_server: str | None = None):
        """A ``call_tool`` for the loop: POST /{name} with the rollout's cookies; the body is the output."""
        url = resources_server or self.resources_server

        async def call_tool(name: str, args: Any) -> str:
            reply = await post(url, f"/{name}", args, cookies, server="resources server")
            if reply.status == 410:  # the server lost this session's state: the episode cannot go on
                raise ServerError("resources server", f"POST /{name}", 410, error_message(reply.text))
            return reply.text

        return call_tool

    async def loop(self, params: ResponseCreateParams, cookies: Cookies, resources_server: str | None = None) -> LoopState:
        return await run_loop(params, self.call_model, self.tool_caller(cookies, resources_server), self.max_steps)

    async def responses(self, request: Request, body: ResponseCreateParams) -> NeMoGymResponse:
        """The agent loop as a Responses endpoint (tools dispatched to the resources server).

        An environment server running an episode session names the session's resources server and
        cookie in the ``x-gymlab-resources-server`` / ``x-gymlab-resources-cookie`` headers, so the
        tool calls reach that session. An agent bound to another resources server refuses (409).
        """
        url = request.headers.get(RESOURCES_SERVER_HEADER) or self.resources_server
        if self.resources_server and url != self.resources_server:
            raise HTTPException(409, f"{self.name}: bound to resources server {self.resources_server}, "
                                     f"but the episode's resources server is {url}")
        cookies = Cookies()
        if cookie := request.headers.get(RESOURCES_COOKIE_HEADER):
            cookies.by_url[url] = dict(p.split("=", 1) for p in cookie.split("; ") if "=" in p)
        try:
            return (await self.loop(body, cookies, url)).final_response()
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
            try:
                state = await self.loop(body.responses_create_params, cookies)
            except BaseException:
                await release_seeded_session(res, cookies)
                raise
            response = state.final_response()
            verify_body = {**row, "response": response.model_dump(mode="json", exclude_none=True)}
            result = await post_ok(res, "/verify", verify_body, cookies, server="resources server")
        except ServerError as exc:
            if exc.status == 410:
                return session_lost(row, exc, time.perf_counter() - t0)
            raise upstream_failure(self.name, exc) from exc
        if state.steps:
            state.steps[-1].reward = float(result.get("reward", 0.0))
            state.steps[-1].terminated = state.stop_reason == "final_message"
            state.steps[-1].truncated = state.stop_reason == "max_steps"
        result["steps"] = [s.model_dump(mode="json", exclude_none=True) for s in state.steps]
        result["duration_s"] = time.perf_counter() - t0
        return result


async def release_seeded_session(url: str, cookies: Cookies) -> None:
    """Close a seeded session whose episode will never reach ``/verify`` (the model failed).

    ``/close_session`` with no body ID closes the cookie's session; a server without the route
    (404) or already gone is fine: the rollout's own error is what gets reported.
    """
    try:
        await post(url, "/close_session", {}, cookies, server="resources server")
    except ServerError:
        pass
