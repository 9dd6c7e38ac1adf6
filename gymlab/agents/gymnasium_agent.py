"""gymnasium_agent: reset -> (model -> step)* with the resources server as the transition function.

Function calls are not dispatched as HTTP routes: the whole model response goes to ``/step``, whose
``info["tool_outputs"]`` come back as function_call_output items. It never calls ``/verify``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from fastapi import FastAPI
from pydantic import Field

from gymlab.agents.base import AgentRunRequest, BaseAgent, dump_row, session_lost, upstream_failure
from gymlab.client import Cookies, post, post_ok
from gymlab.errors import ServerError
from gymlab.loop import LoopState, ask_model, gymnasium_transition
from gymlab.protocol import Message, ResponseCreateParams
from gymlab.protocol.gymnasium import GymnasiumResetResponse, GymnasiumStepResponse

_RES = "resources server"
_log = logging.getLogger("gymlab.agents")


class GymnasiumAgent(BaseAgent):
    """The built-in Gymnasium agent. ``/run`` plays one episode and returns its rollout record."""

    resources_server: str = ""
    max_steps: int = Field(10, ge=1, description="Model calls per episode; running out forces truncated.")

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/run")(self.run)
        return app

    async def run(self, body: AgentRunRequest) -> dict[str, Any]:
        """One episode: the rollout fields, the NeMo Gym ones first, then ``steps`` and timings."""
        t0 = time.perf_counter()
        row = dump_row(body)
        cookies = Cookies()
        ended = False
        try:
            reset = GymnasiumResetResponse.model_validate(await self._post("/reset", row, cookies))
            params = with_user_message(body.responses_create_params, reset.observation)
            state = LoopState(params)
            last: GymnasiumStepResponse | None = None
            while len(state.steps) < self.max_steps:
                t1 = time.perf_counter()
                response = await ask_model(state, self.call_model)
                step_body = {**row, "response": response.model_dump(mode="json", exclude_none=True)}
                last = GymnasiumStepResponse.model_validate(await self._post("/step", step_body, cookies))
                gymnasium_transition(state, response, last, time.perf_counter() - t1)
                if last.terminated or last.truncated:
                    ended = True
                    break
            else:
                state.stop_reason = "max_steps"
                state.steps[-1].truncated = True
        except ServerError as exc:
            if exc.status == 410:  # the session's worker is gone: a masked sample, not a zero reward
                return session_lost(row, exc, time.perf_counter() - t0)
            raise upstream_failure(self.name, exc) from exc
        finally:
            if not ended:
                await self._close(cookies)
        final = last or GymnasiumStepResponse()
        return {
            "responses_create_params": params.model_dump(mode="json", exclude_none=True),
            "response": state.final_response().model_dump(mode="json", exclude_none=True),
            "reward": sum(s.reward for s in state.steps),
            "terminated": final.terminated,
            "truncated": final.truncated or state.stop_reason == "max_steps",
            "info": final.info,
            "mask_sample": final.mask_sample,
            "failure_kind": final.failure_kind,
            "failure_reason": final.failure_reason,
            "steps": [s.model_dump(mode="json", exclude_none=True) for s in state.steps],
            "duration_s": time.perf_counter() - t0,
        }

    async def _post(self, path: str, body: dict, cookies: Cookies) -> Any:
        if not self.resources_server:
            raise ServerError(self.name, f"POST {path}", 0, "no resources_server configured",
                              "pass resources= to serve_agent or set resources_server in the config")
        return await post_ok(self.resources_server, path, body, cookies, server=_RES)

    async def _close(self, cookies: Cookies) -> None:
        """Release an episode the environment did not end (out of steps, or an upstream failure).

        A server without ``/close`` (the reference protocol has none) answers 404; that is expected.
        Any other failure is logged, so it does not hide the error already being reported.
        """
        if not self.resources_server or not cookies.header(self.resources_server):
            return
        try:
            reply = await post(self.resources_server, "/close", {}, cookies, server=_RES)
        except ServerError as exc:
            _log.warning("%s: could not release the episode: %s", self.name, exc)
            return
        if not reply.ok and reply.status != 404:
            _log.warning("%s: POST /close on the resources server answered %s: %s", self.name, reply.status, reply.text[:300])


def with_user_message(params: ResponseCreateParams, observation: str | None) -> ResponseCreateParams:
    """``params`` with ``observation`` appended to its input as a user message (unchanged when empty)."""
    if not observation:
        return params
    return params.model_copy(update={"input": [*params.input_items(), Message(role="user", content=observation)]})
