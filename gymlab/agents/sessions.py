"""Agent sessions: an agent server's per-episode state, seeded and closed by ``agent_session_id``, under
the resources servers' episode-session rules (``EpisodeSessions``; docs/servers.md)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

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


def agent_sessions(
    retry_window_seconds: float, ttl_seconds: float | None, close: Callable[[str], Awaitable[None]]
) -> EpisodeSessions:
    """An agent's session table, with agent-session answers; ``close(agent_session_id)`` releases one."""

    async def release(session_id: Any) -> None:
        await close(str(session_id))

    return EpisodeSessions(
        retry_window_seconds,
        ttl_seconds,
        release,
        id_name="agent_session_id",
        answers=(
            lambda sid, _: AgentSeedSessionResponse(agent_session_id=sid).model_dump(mode="json"),
            lambda sid: AgentCloseSessionResponse(agent_session_id=sid).model_dump(mode="json", exclude_none=True),
        ),
    )


def mount_agent_session_routes(
    app: FastAPI,
    sessions: Callable[[], EpisodeSessions],
    seed_state: Callable[[AgentSeedSessionRequest], Awaitable[None]],
) -> None:
    """Add the agent-session seed and close routes to ``app``: ``sessions()`` is the table, ``seed_state(body)``."""

    async def seed(body: AgentSeedSessionRequest) -> AgentSeedSessionResponse:
        return JSONResponse(await sessions().seed(body, lambda: seed_state(body)))

    async def close(body: AgentCloseSessionRequest) -> AgentCloseSessionResponse:
        table = sessions()
        return JSONResponse(await table.close(body, table.release))

    app.post(SEED_ROUTE, response_model=AgentSeedSessionResponse)(seed)
    app.post(CLOSE_ROUTE, response_model=AgentCloseSessionResponse)(close)
