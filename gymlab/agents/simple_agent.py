"""simple_agent: seed -> model/tool loop -> verify, with tools as HTTP routes of the resources server."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, HTTPException, Request
from pydantic import Field

from gymlab._runtime.routes import sessionless
from gymlab.agents.base import AgentRunRequest, BaseAgent, EpisodeRun, dump_row, typed
from gymlab.client import Cookies, error_message, post
from gymlab.errors import ServerError
from gymlab.loop import LoopState, run_loop
from gymlab.models.streaming import StreamableParams, streamed, unstreamed
from gymlab.protocol import RESOURCES_COOKIE_HEADER, RESOURCES_SERVER_HEADER, NeMoGymResponse, ResponseCreateParams
from gymlab.protocol import record as records
from gymlab.protocol.record import Rollout


class SimpleAgent(BaseAgent):
    """The built-in seed/verify agent. ``/run`` grades an episode; ``/v1/responses`` runs the loop.

    NeMo Gym's options, with its meaning: ``skip_verification`` ends an episode without ``/verify``
    (reward ``skip_verification_reward``, ``verification_skipped: true``; the session is closed);
    ``execute_tools: false`` makes ``/v1/responses`` return the model's function calls unresolved,
    for the environment server that runs them, and ``/run`` refuse (400).
    """

    execute_tools: bool = Field(
        True,
        description="Run the model's tool calls (false: /v1/responses returns them unresolved; /run refuses).",
    )

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/run", response_model=Rollout)(self.run)
        app.post("/v1/responses", response_model_exclude_none=True)(self.responses)
        return app

    def tool_caller(self, cookies: Cookies, resources_server: str | None = None):
        """A ``call_tool`` for the loop: POST /{name} with the rollout's cookies; the body is the output.

        The loop has already refused undeclared and reserved names, so only declared tools get here.
        """
        url = resources_server or self.resources_server

        async def call_tool(name: str, args: Any) -> str:
            with typed("resources"):
                reply = await post(
                    url, f"/{name}", args, cookies, server="resources server", timeout=self.timeouts.tool
                )
                if reply.status == 410:  # the server lost this session's state: the episode cannot go on
                    raise ServerError("resources server", f"POST /{name}", 410, error_message(reply.text))
            return reply.text

        return call_tool

    async def loop(
        self, params: ResponseCreateParams, cookies: Cookies, resources_server: str | None = None
    ) -> LoopState:
        call_tool = self.tool_caller(cookies, resources_server) if self.execute_tools else None
        return await run_loop(params, self.call_model, call_tool, self.max_steps)

    @sessionless  # the Request is read for its headers, never for a session
    async def responses(self, request: Request, body: StreamableParams) -> NeMoGymResponse:
        """The agent loop as a Responses endpoint (tools dispatched to the resources server).

        An environment server running an episode session names the session's resources server and
        cookie in the ``x-gymlab-resources-server`` / ``x-gymlab-resources-cookie`` headers, so the
        tool calls reach that session. An agent bound to another resources server refuses (409).
        ``stream: true`` answers with the loop's final response as Responses events.
        """
        url = request.headers.get(RESOURCES_SERVER_HEADER) or self.resources_server
        if self.resources_server and url != self.resources_server:
            raise HTTPException(
                409,
                f"{self.name}: bound to resources server {self.resources_server}, "
                f"but the episode's resources server is {url}",
            )
        cookies = Cookies.from_header(url, request.headers.get(RESOURCES_COOKIE_HEADER))
        try:
            response = (await self.loop(unstreamed(body) if body.stream else body, cookies, url)).final_response()
        except (ServerError, TimeoutError) as exc:
            raise self.episode_failed(exc, "agent") from exc
        return streamed(response) if body.stream else response

    async def run(self, body: AgentRunRequest) -> Rollout:
        """One graded episode: the verify response plus per-step records (``run_episode``: a masked
        record if the session was lost, a typed 502 for any other failure)."""
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
            run.stage = "verification"
            verify = {**row, "response": response.model_dump(mode="json", exclude_none=True)}
            if self.skip_verification:  # nothing graded: the session is closed by run_episode
                answer = {**verify, "reward": self.skip_verification_reward, "verification_skipped": True}
            else:
                answer = await self.post_resources("/verify", verify, run.cookies, self.timeouts.verify)
                run.session.ended()  # a verify releases the session it grades
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
