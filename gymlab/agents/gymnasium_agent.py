"""gymnasium_agent: reset -> (model -> step)* with the resources server as the transition function.

Function calls are not dispatched as HTTP routes: the whole model response goes to ``/step``, whose
``info["tool_outputs"]`` come back as function_call_output items. It never calls ``/verify``.
"""

from __future__ import annotations

import asyncio
import time

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from pydantic import Field

from gymlab.agents.base import AgentRunRequest, BaseAgent, dump_row, is_lost, record_response
from gymlab.client import Cookies
from gymlab.errors import ServerError
from gymlab.failures import failure_of
from gymlab.loop import LoopState, ask_model, gymnasium_transition, with_user_message
from gymlab.protocol import record as records
from gymlab.protocol.gymnasium import GymnasiumResetResponse, GymnasiumStepResponse
from gymlab.protocol.record import Rollout


class GymnasiumAgent(BaseAgent):
    """The built-in Gymnasium agent. ``/run`` plays one episode and returns its rollout record."""

    max_steps: int = Field(10, ge=1, description="Model calls per episode; running out forces truncated.")

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/run", response_model=Rollout)(self.run)
        return app

    async def run(self, body: AgentRunRequest) -> JSONResponse:
        """One episode: the rollout record (a masked record if the session was lost; a typed 502 for
        any other failure, after releasing the episode)."""
        t0 = time.perf_counter()
        row = dump_row(body)
        cookies = Cookies()
        stage, ended, last = "seed", False, None
        try:
            async with asyncio.timeout(self.timeouts.episode):
                reset = GymnasiumResetResponse.model_validate(
                    await self.post_resources("/reset", row, cookies, self.timeouts.seed)
                )
                stage = "agent"
                params = with_user_message(body.responses_create_params, reset.observation)
                state = LoopState(params)
                while len(state.steps) < self.max_steps:
                    t1 = time.perf_counter()
                    response = await ask_model(state, self.call_model)
                    step_body = {**row, "response": response.model_dump(mode="json", exclude_none=True)}
                    last = GymnasiumStepResponse.model_validate(
                        await self.post_resources("/step", step_body, cookies, self.timeouts.step)
                    )
                    gymnasium_transition(state, response, last, time.perf_counter() - t1)
                    if last.terminated or last.truncated:
                        ended = True
                        break
                else:
                    state.stop_reason = "max_steps"
        except BaseException as exc:
            if stage != "seed" and not ended:
                await self.release("/close", cookies)
            if not isinstance(exc, (ServerError, TimeoutError)):
                raise
            failure = failure_of(exc, role="agent", stage=stage)
            if is_lost(failure):
                return record_response(records.failed(row, failure, duration_s=time.perf_counter() - t0))
            raise self.episode_failed(exc, stage) from exc
        if not ended:
            await self.release("/close", cookies)
        record = records.from_transitions(
            params,
            state.final_response(),
            state.steps,
            row=row,
            last=last,
            cut_by_limit=state.stop_reason == "max_steps",
            duration_s=time.perf_counter() - t0,
        )
        return record_response(record)
