"""What every agent server shares: the run-request body, time budgets, typed failures, the model call.

An agent that cannot finish an episode answers 502 with a typed ``failure`` in its error body (the
kind, the stage, which server failed with which status), so collection and the Lab read the kind
as data. A lost session (HTTP 410) is the one failure answered with a masked record instead.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from gymlab._runtime.hangup import CancelOnHangup
from gymlab.client import Cookies, ask_model_server, close_http_session, post, post_ok
from gymlab.errors import EpisodeFailed, ServerError, error_body
from gymlab.failures import Role, failure_of
from gymlab.loop import DEFAULT_MAX_STEPS
from gymlab.protocol import NeMoGymResponse
from gymlab.protocol.agent_sessions import AgentSeedSessionRequest
from gymlab.protocol.failure_kinds import Failure, Stage
from gymlab.protocol.record import Rollout
from gymlab.protocol.resources import AgentRunRequest, dump_row  # noqa: F401  (re-exported for agents)
from gymlab.server import BaseServer


class Timeouts(BaseModel):
    """Seconds each hop of an episode may take before it fails with ``transport_timeout``.

    ``episode`` bounds a whole ``/run`` (``agent_timeout``); None lifts a bound. Set in a config as
    ``timeouts: {model: 60}``, or ``lab.serve_agent(..., timeouts={"model": 60})``.
    """

    model_config = ConfigDict(extra="forbid")

    model: float | None = Field(300.0, gt=0, description="One model call.")
    tool: float | None = Field(120.0, gt=0, description="One tool call to the resources server.")
    seed: float | None = Field(120.0, gt=0, description="/seed_session or /reset.")
    verify: float | None = Field(300.0, gt=0, description="/verify.")
    step: float | None = Field(120.0, gt=0, description="One Gymnasium /step.")
    cleanup: float | None = Field(30.0, gt=0, description="Releasing a session after a failure.")
    episode: float | None = Field(1800.0, gt=0, description="A whole /run.")


class BaseAgent(BaseServer):
    """An agent server bound to a model server (and usually a resources server), by URL.

    Agent sessions (``/v1/agent_sessions`` and its ``/close``) follow the resources servers' session
    rules (``gymlab.agents.sessions``); an agent with per-episode state overrides
    ``seed_agent_session`` and ``close_agent_session`` and keys its state by ``agent_session_id``
    in ``self.session_state`` (the id is also the session cookie's ``SESSION_ID_KEY`` in every
    request of the session).
    """

    model_server: str = ""
    resources_server: str = ""
    max_steps: int | None = Field(DEFAULT_MAX_STEPS, ge=1, description="Model calls per episode (None: no limit).")
    timeouts: Timeouts = Field(default_factory=Timeouts)

    _episodes: Any = PrivateAttr(default=None)
    _session_state: dict[str, Any] = PrivateAttr(default_factory=dict)

    @property
    def session_state(self) -> dict[str, Any]:
        """Per-agent-session state, keyed by ``agent_session_id``: process state, never config."""
        return self._session_state

    def setup_webserver(self) -> FastAPI:
        from gymlab.agents.sessions import mount_agent_session_routes

        app = super().setup_webserver()
        mount_agent_session_routes(app, self)

        @contextlib.asynccontextmanager
        async def lifespan(_app):
            yield
            await close_http_session()

        app.router.lifespan_context = lifespan
        app.exception_handler(EpisodeFailed)(episode_failed)
        app.add_middleware(CancelOnHangup)  # a caller that hangs up stops its episode and frees its session
        return app

    @property
    def episode_sessions(self):
        """This agent's open agent sessions, locks, fences and idle reaper."""
        if self._episodes is None:
            from gymlab.agents.sessions import agent_sessions

            self._episodes = agent_sessions(self)
        return self._episodes

    async def seed_agent_session(self, body: AgentSeedSessionRequest) -> None:
        """Set up an agent session's state under ``body.agent_session_id``; the default keeps none.

        Runs once per session (a repeated seed is answered without running it again).
        """

    async def close_agent_session(self, agent_session_id: str) -> None:
        """Release an agent session's state (once per close; also for an ID that was never seeded)."""
        self.session_state.pop(agent_session_id, None)

    async def call_model(self, body: dict) -> NeMoGymResponse:
        """The model's response to ``body``; a failure carries a model-provider kind."""
        if not self.model_server:
            raise ServerError(
                self.name,
                "POST /v1/responses",
                0,
                "no model_server configured",
                "pass model= to serve_agent or set model_server in the config",
            )
        with typed("model"):
            return await ask_model_server(self.model_server, body, timeout=self.timeouts.model)

    async def post_resources(self, path: str, body: Any, cookies: Cookies, timeout: float | None) -> Any:
        """POST to the bound resources server; an error status raises ``ServerError``."""
        if not self.resources_server:
            raise ServerError(
                self.name,
                f"POST {path}",
                0,
                "no resources_server configured",
                "pass resources= to serve_agent or set resources_server in the config",
            )
        with typed("resources", "verification" if path == "/verify" else None):
            return await post_ok(self.resources_server, path, body, cookies, server="resources server", timeout=timeout)

    async def release(self, path: str, cookies: Cookies) -> None:
        """Release a session the episode will not end itself (``/close_session`` or ``/close``).

        A server without the route (404) is fine; any other failure is swallowed so it does not
        hide the error already being reported (the session then ends by the server's TTL).
        """
        if not self.resources_server or not cookies.header(self.resources_server):
            return
        with contextlib.suppress(ServerError):
            await asyncio.shield(
                post(self.resources_server, path, {}, cookies, server="resources server", timeout=self.timeouts.cleanup)
            )

    def episode_failed(self, exc: BaseException, stage: Stage) -> EpisodeFailed:
        """The 502 that reports ``exc``, raised at ``stage`` of an episode, with its typed failure."""
        failure = failure_of(exc, role="agent", stage=stage)
        if isinstance(exc, TimeoutError) and not isinstance(exc, ServerError):
            failure = failure.model_copy(
                update={
                    "message": f"the episode ran past timeouts.episode ({self.timeouts.episode:g} s) at stage {stage}"
                }
            )
        return EpisodeFailed(self.name, "POST /run", failure)


class typed:  # noqa: N801  (used as ``with typed("model"):``, once per hop)
    """Give a ``ServerError`` raised inside the failure of a request to a ``role`` server.

    A class rather than a generator context manager: it is entered on every hop of every episode.
    """

    __slots__ = ("role", "stage")

    def __init__(self, role: Role, stage: Stage | None = None):
        self.role, self.stage = role, stage

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind, exc, trace) -> bool:
        if isinstance(exc, ServerError):
            exc.failure = failure_of(exc, role=self.role, stage=self.stage)
        return False


async def episode_failed(request: Request, exc: EpisodeFailed) -> JSONResponse:
    route = f"{request.method} {request.url.path}"
    return JSONResponse(
        status_code=502,
        content=error_body(
            exc.server, route, exc.cause, error="EpisodeFailed", hint=exc.hint or None, failure=exc.failure
        ),
    )


def record_response(record: Rollout) -> Response:
    """A rollout as ``/run``'s answer, serialised once, straight to JSON bytes (FastAPI would validate
    it again, then encode a dict)."""
    return Response(record.model_dump_json(exclude_none=True), media_type="application/json")


def is_lost(failure: Failure) -> bool:
    """A lost session ends in a masked record (200), not an error: the episode cannot be replayed."""
    return failure.kind == "session_lost"
