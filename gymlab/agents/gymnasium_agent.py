"""gymnasium_agent: reset -> (model -> step)* with the resources server as transition (docs/servers.md)."""

from __future__ import annotations

from typing import ClassVar

from fastapi import FastAPI
from pydantic import Field

from gymlab.agents.base import AgentRunRequest, BaseAgent, EpisodeRun, dump_row
from gymlab.errors import ServerError
from gymlab.loop import LoopState, gymnasium_turn, with_user_message
from gymlab.protocol import NeMoGymResponse
from gymlab.protocol import record as records
from gymlab.protocol.gymnasium import GymnasiumResetResponse
from gymlab.protocol.record import Rollout


class GymnasiumAgent(BaseAgent):
    """The built-in Gymnasium agent. ``/run`` plays one episode and returns its rollout record."""

    max_steps: int = Field(10, ge=1, description="Model calls per episode; running out forces truncated.")
    verifies: ClassVar[bool] = False  # the rewards are the steps'

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/run", response_model=Rollout)(self.run)
        return app

    async def run(self, body: AgentRunRequest) -> Rollout:
        """One episode's rollout record (failures as ``run_episode`` answers them; cut by ``max_steps``: closed)."""
        row = dump_row(body)

        async def play(run: EpisodeRun) -> Rollout:
            reset = GymnasiumResetResponse.model_validate(await self.open_session(run, "/reset", row, "/close"))
            params = with_user_message(body.responses_create_params, reset.observation)
            state, refused = LoopState(params), False

            async def post_step(response: NeMoGymResponse) -> dict:
                nonlocal refused
                step_body = {**row, "response": response.model_dump(mode="json", exclude_none=True)}
                try:
                    return await self.post_resources("/step", step_body, run.cookies, self.timeouts.step)
                except ServerError as exc:
                    if exc.status != 413:
                        raise
                    refused = True  # a refused step ends the episode; run_episode closes its session
                    return {"truncated": True, "info": {"response_too_large": str(exc)}}

            while state.stop_reason is None and len(state.steps) < self.max_steps:
                await gymnasium_turn(state, self.call_model, post_step)
            if state.stop_reason is None:
                state.stop_reason = "max_steps"
            elif not refused:  # a terminal step releases the episode itself
                run.session.ended()
            return records.from_transitions(
                params,
                state.final_response(),
                state.steps,
                row=row,
                last=state.transition,
                cut_by_limit=state.stop_reason == "max_steps",
                duration_s=run.elapsed(),
            )

        return await self.run_episode(row, play)
