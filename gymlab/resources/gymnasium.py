"""GymnasiumServer: the environment as a transition function, ``/reset`` and ``/step`` (no ``/verify``)."""

from __future__ import annotations

import json
from abc import abstractmethod
from typing import Any

from fastapi import FastAPI, Request

from gymlab._runtime.episodes import mount_episode_routes
from gymlab._runtime.routes import SESSION_ENDED
from gymlab.protocol import SESSION_ID_KEY, NeMoGymResponse
from gymlab.protocol.failure_kinds import validate_failure_kind
from gymlab.protocol.gymnasium import (
    RESERVED_INFO_KEYS,
    GymnasiumCloseResponse,
    GymnasiumResetRequest,
    GymnasiumResetResponse,
    GymnasiumStepRequest,
    GymnasiumStepResponse,
)
from gymlab.protocol.sessions import ResourcesSeedSessionRequest
from gymlab.resources.simple import EpisodeServer
from gymlab.rewards.rubric import GRADING_FAILURES, grading_failure


class GymnasiumServer(EpisodeServer):
    """A Gymnasium-protocol environment: write ``step`` (and ``reset``); per-episode state in ``session_state``."""

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/reset")(self._reset_route)
        app.post("/step")(self._step_route)
        app.post("/close")(self._close_route)
        # episode sessions: the seed is a reset (its observation the seed's), the close ends it like a last step
        mount_episode_routes(app, self.episode_sessions, self._episode_seed, self.close_episode)
        return app

    async def _episode_seed(self, body: ResourcesSeedSessionRequest) -> dict[str, Any]:
        reset = await self.reset_session(body.task_data, body.resources_session_id)
        return {} if reset.observation is None else {"observation": reset.observation}  # none: left out (spec)

    async def _reap(self, session_id: str) -> None:
        await self.close_episode(session_id)

    async def reset(self, metadata: dict, session_id: str | None = None) -> tuple[str | None, dict]:
        """Start an episode; returns ``(observation, info)``. The default keeps no state."""
        return None, {}

    @abstractmethod
    async def step(
        self, action: NeMoGymResponse, metadata: dict, session_id: str | None = None
    ) -> tuple[str | None, float, bool, bool, dict]:
        """Apply the model's response; returns ``(observation, reward, terminated, truncated, info)``."""

    async def close_session(self, session_id: str) -> None:
        """Release an episode's state. Override for external resources and ``await super().close_session(...)``."""
        self.session_state.pop(session_id, None)

    @staticmethod
    def tool_output(call: Any, result: Any) -> dict[str, str]:
        """A ``tool_outputs`` entry answering ``call`` (the agent turns it into a function_call_output)."""
        return {"call_id": call.call_id, "output": json.dumps(result, default=str)}

    async def reset_session(self, metadata: dict, session_id: str) -> GymnasiumResetResponse:
        """``reset()`` for ``session_id``; a live episode on the same session is closed first."""
        if session_id in self.session_state:
            await self._release(session_id)
        try:
            result = await self.call_hook(self.reset, metadata, session_id)
            observation, info = _unpacked(self, "reset", result, "(observation, info)")
            return GymnasiumResetResponse(observation=_observation(self, observation), info=dict(info or {}))
        except BaseException as exc:
            await self._release(session_id, exc)
            raise

    async def step_session(self, action: NeMoGymResponse, metadata: dict, session_id: str) -> GymnasiumStepResponse:
        """``step()`` for ``session_id``: reserved info keys lifted, state released when the episode ends."""
        try:
            try:
                result = await self.call_hook(self.step, action, metadata, session_id)
            except GRADING_FAILURES as exc:  # the model's own action: its 0, terminated; the work's: masked, truncated
                failed = grading_failure(exc)
                result = (None, 0.0, "answer_error" in failed, "mask_sample" in failed, failed)
            shape = "(observation, reward, terminated, truncated, info)"
            observation, reward, terminated, truncated, info = _unpacked(self, "step", result, shape)
            info = dict(info or {})
            lifted = {k: info.pop(k) for k in RESERVED_INFO_KEYS if k in info}
            validate_failure_kind(lifted.get("failure_kind"))
            answer = GymnasiumStepResponse(
                observation=_observation(self, observation),
                reward=float(reward),
                terminated=bool(terminated),
                truncated=bool(truncated),
                info=info,
                mask_sample=bool(lifted.get("mask_sample", False)),
                failure_kind=lifted.get("failure_kind"),
                failure_reason=None if lifted.get("failure_reason") is None else str(lifted["failure_reason"]),
            )
        except BaseException as exc:
            await self._release(session_id, exc)
            raise
        if answer.terminated or answer.truncated:
            await self._release(session_id)
        return answer

    async def close_episode(self, session_id: str) -> bool:
        """Release ``session_id``'s episode if it is still held (an agent that ran out of steps)."""
        held = session_id in self.session_state
        if held:
            await self._release(session_id)
        return held

    async def _release(self, session_id: str, failure: BaseException | None = None) -> None:
        """``close_session``, then the entry dropped even if an override forgot ``super()`` (``release_state``)."""
        await self.episode_sessions.release_state(session_id, self.close_session, self.session_state, failure)

    async def _reset_route(self, request: Request, body: GymnasiumResetRequest) -> GymnasiumResetResponse:
        sid = request.session[SESSION_ID_KEY]
        answer = await self.reset_session(body.metadata(), sid)
        if sid in self.session_state:
            self.episode_sessions.track_flat(sid)  # held until a terminal step or /close
        return answer

    async def _step_route(self, request: Request, body: GymnasiumStepRequest) -> GymnasiumStepResponse:
        answer = await self.step_session(body.response, body.metadata(), request.session[SESSION_ID_KEY])
        if answer.terminated or answer.truncated:
            request.scope[SESSION_ENDED] = True  # its state is released: the worker router frees its ownership
        return answer

    async def _close_route(self, request: Request) -> GymnasiumCloseResponse:
        """Release this cookie's episode (gymlab's addition; the reference protocol has no close)."""
        return GymnasiumCloseResponse(closed=await self.close_episode(request.session[SESSION_ID_KEY]))


def _observation(server: GymnasiumServer, observation: Any) -> str | None:
    if observation is None or isinstance(observation, str):
        return observation
    raise TypeError(
        f"{type(server).__name__}: an observation must be a string or None, got {type(observation).__name__}"
    )


def _unpacked(server: GymnasiumServer, hook: str, result: Any, shape: str) -> tuple:
    """``result`` if it is the tuple ``shape`` names, else a ``TypeError`` naming the hook."""
    if not (isinstance(result, tuple) and len(result) == shape.count(",") + 1):
        raise TypeError(f"{type(server).__name__}.{hook} must return {shape}, got {result!r:.200}")
    return result
