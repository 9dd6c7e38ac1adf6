"""Agent-session bodies: how a caller seeds and closes an agent server's per-episode state (docs/protocol.md)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gymlab.protocol.sessions import MAX_SESSION_ID_LENGTH, EpisodeId, TaskId

SEED_ROUTE = "/v1/agent_sessions"
CLOSE_ROUTE = "/v1/agent_sessions/close"


class _AgentSessionBody(BaseModel):
    """A seed's or close's session and episode; unknown keys are refused, as the reference does."""

    model_config = ConfigDict(extra="forbid")

    agent_session_id: str = Field(min_length=1, max_length=MAX_SESSION_ID_LENGTH)
    episode_id: EpisodeId


class AgentSeedSessionRequest(_AgentSessionBody):
    """Body of an agent-session seed: a repeat of it is the same session, anything else under its ID a 409."""

    task_id: TaskId
    tool_accesses: list[dict[str, Any]] = Field(default_factory=list)
    sandbox_access: dict[str, Any] | None = None

    def episode_key(self) -> dict[str, Any]:
        """What a re-seed must repeat to be the same session (every field but the ID)."""
        return self.model_dump(mode="json", exclude={"agent_session_id"})


class AgentSeedSessionResponse(BaseModel):
    agent_session_id: str


class AgentCloseSessionRequest(_AgentSessionBody):
    """Body of an agent-session close: the session and the episode it was seeded for."""


class AgentCloseSessionResponse(BaseModel):
    """Answer of a close; a repeated close within the retry window gets the same answer."""

    agent_session_id: str
    agent_observations: dict[str, Any] | None = None
    resources_cookies: dict[str, str] | None = None
