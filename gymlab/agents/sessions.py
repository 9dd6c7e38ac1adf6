"""Agent sessions: an agent server's per-episode state, seeded and closed by ``agent_session_id``.

The same rules as a resources server's episode sessions (``EpisodeSessions``): a seed and the close
of one session run one at a time; a repeated seed answers as the first did, another seed under the
same ID is refused with 409; a close releases once, then fences the ID for the retry window (a close
of an ID nobody seeded fences it too, so a delayed seed cannot open it); a close naming another
episode is 409. The seed's ID becomes the session cookie's ID, so a request whose cookie names
another session than its body is 409, and with several workers the seed, the requests that carry
the cookie and the close all run in the worker holding the session.
"""

from __future__ import annotations

from typing import Any, Protocol

from fastapi import FastAPI
from fastapi.responses import JSONResponse

from gymlab._runtime.episodes import EpisodeSessions
from gymlab.protocol.agent_sessions import (
    CLOSE_ROUTE,
    SEED_ROUTE,
    AgentCloseSessionRequest,
    AgentCloseSessionResponse,
    AgentSeedSessionRequest,
    AgentSeedSessionResponse,
)


class SessionAgent(Protocol):
    """What the session routes read of an agent (``BaseAgent`` is one; named here, not imported, so
    ``agents.base``, which mounts these routes, and this module do not import each other)."""

    session_close_retry_window_seconds: float
    session_ttl_seconds: float | None

    @property
    def episode_sessions(self) -> EpisodeSessions: ...

    async def seed_agent_session(self, body: AgentSeedSessionRequest) -> Any: ...

    async def close_agent_session(self, agent_session_id: str) -> Any: ...


def agent_sessions(agent: SessionAgent) -> EpisodeSessions:
    """The agent's session table, with agent-session answers and its release hook."""

    async def release(session_id: Any) -> None:
        await agent.close_agent_session(str(session_id))

    return EpisodeSessions(
        agent.session_close_retry_window_seconds,
        agent.session_ttl_seconds,
        release,
        id_name="agent_session_id",
        answers=(
            lambda sid, _: AgentSeedSessionResponse(agent_session_id=sid).model_dump(mode="json"),
            lambda sid: AgentCloseSessionResponse(agent_session_id=sid).model_dump(mode="json", exclude_none=True),
        ),
    )


def mount_agent_session_routes(app: FastAPI, agent: SessionAgent) -> None:
    """Add ``POST /v1/agent_sessions`` (seed) and ``POST /v1/agent_sessions/close`` to ``app``."""

    async def seed(body: AgentSeedSessionRequest) -> AgentSeedSessionResponse:
        return JSONResponse(await agent.episode_sessions.seed(body, lambda: agent.seed_agent_session(body)))

    async def close(body: AgentCloseSessionRequest) -> AgentCloseSessionResponse:
        return JSONResponse(await agent.episode_sessions.close(body, agent.episode_sessions.release))

    app.post(SEED_ROUTE, response_model=AgentSeedSessionResponse)(seed)
    app.post(CLOSE_ROUTE, response_model=AgentCloseSessionResponse)(close)
