"""simple_agent: seed -> model/tool loop -> verify, with tools as HTTP routes of the resources server."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, HTTPException, Request
from pydantic import Field

from gymlab._http.client import Cookies, error_message
from gymlab._runtime.routes import sessionless
from gymlab.agents.base import AgentRunRequest, BaseAgent, EpisodeRun, dump_row, typed
from gymlab.errors import ServerError
from gymlab.loop import DEFAULT_MAX_TOOL_CALLS_PER_TURN, LoopState, run_loop
from gymlab.models.streaming import StreamableParams, streamed, unstreamed
from gymlab.protocol import RESOURCES_COOKIE_HEADER, RESOURCES_SERVER_HEADER, NeMoGymResponse, ResponseCreateParams
from gymlab.protocol import record as records
from gymlab.protocol.record import Rollout


class SimpleAgent(BaseAgent):
    """The built-in seed/verify agent: ``/run`` grades an episode, ``/v1/responses`` runs the loop."""

    execute_tools: bool = Field(
        True,
        description="Run the model's tool calls (false: /v1/responses returns them unresolved; /run refuses).",
    )
    max_tool_calls_per_turn: int | None = Field(
        DEFAULT_MAX_TOOL_CALLS_PER_TURN,
        ge=1,
        description="Function calls run of one model answer; more end the episode, truncated (None: no limit). "
        "The request's max_tool_calls bounds the episode's.",
    )

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/run", response_model=Rollout)(self.run)
        app.post("/v1/responses", response_model_exclude_none=True)(self.responses)
        return app

    def tool_caller(self, cookies: Cookies):
        """The loop's ``call_tool`` (declared tools only): POST /{name} with the rollout's cookies; the body."""

        async def call_tool(name: str, args: Any) -> str:
            path = f"/{name}"
            with typed("resources"):
                url, timeout = self._resources(path), self.timeouts.tool
                reply = await self.client.post(url, path, args, cookies, "resources server", timeout)
                if reply.status == 410:  # the server lost this session's state: the episode cannot go on
                    raise ServerError("resources server", f"POST {path}", 410, error_message(reply.text))
            return reply.text

        return call_tool

    async def loop(self, params: ResponseCreateParams, cookies: Cookies) -> LoopState:
        call_tool = self.tool_caller(cookies) if self.execute_tools else None
        state = LoopState(params, max_tool_calls_per_turn=self.max_tool_calls_per_turn)
        return await run_loop(state, self.call_model, call_tool, self.max_steps)

    @sessionless  # the Request is read for its headers, never for a session
    async def responses(self, request: Request, body: StreamableParams) -> NeMoGymResponse:
        """The agent loop as a Responses endpoint, tools sent to its ``resources_server`` (docs/servers.md)."""
        named = request.headers.get(RESOURCES_SERVER_HEADER)
        if named is not None and named != self.resources_server:
            bound = (
                f"is bound to resources server {self.resources_server}"
                if self.resources_server
                else "has no resources_server"
            )
            raise HTTPException(
                409,
                f"{self.name}: this agent {bound}, but the episode's resources server is {named}; "
                f"set resources_server: {named} in the agent's config",
            )
        cookies = Cookies.from_header(self.resources_server, request.headers.get(RESOURCES_COOKIE_HEADER))
        try:
            response = (await self.loop(unstreamed(body) if body.stream else body, cookies)).final_response()
        except (ServerError, TimeoutError) as exc:
            raise self.episode_failed(exc, "agent") from exc
        return streamed(response) if body.stream else response

    async def run(self, body: AgentRunRequest) -> Rollout:
        """One graded episode: the verify response plus per-step records (failures: ``run_episode``)."""
        if not self.execute_tools:
            raise HTTPException(
                400,
                f"{self.name}: POST /run needs execute_tools: true (with execute_tools: false the tools would "
                "never run); drive this agent through an environment server's /v1/responses, or set it true",
            )
        row = dump_row(body)

        async def play(run: EpisodeRun) -> Rollout:
            await self.open_session(run, "/seed_session", row, "/close_session")
            state = await self.loop(body.responses_create_params, run.cookies)
            run.steps = state.steps  # a verify that fails keeps them in the masked record
            response = state.final_response()
            verify = {**row, "response": response.model_dump(mode="json", exclude_none=True)}
            answer = await self.grade(run, verify, run.cookies)
            return records.verified(
                answer,
                state.steps,
                state.stop_reason,
                run.elapsed(),
                row=row,
                sent={
                    "response": (verify["response"], response),
                    "responses_create_params": (row["responses_create_params"], body.responses_create_params),
                },
            )

        return await self.run_episode(row, play)
