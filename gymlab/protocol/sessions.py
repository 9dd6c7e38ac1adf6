"""Episode-session bodies: how an environment server seeds and closes a resources-server session."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from gymlab.protocol.resources import BaseSeedSessionRequest, BaseSeedSessionResponse

#: Headers of an environment server's agent call: the episode's resources server and the session's Cookie header.
RESOURCES_SERVER_HEADER = "x-gymlab-resources-server"
RESOURCES_COOKIE_HEADER = "x-gymlab-resources-cookie"

#: The longest ``resources_session_id`` a server accepts (it travels in every cookie of the episode).
MAX_SESSION_ID_LENGTH = 256


class EpisodeId(BaseModel):
    """Which rollout, and which retry of it, a session belongs to."""

    rollout_id: str
    attempt: int = 0


class TaskId(BaseModel):
    """A task's ID within its taskset."""

    taskset: str = ""
    task_id: str


class ResourcesSeedSessionRequest(BaseSeedSessionRequest):
    """Body of an episode seed: the session's ID, its episode, its task and the task's own fields."""

    resources_session_id: str = Field(min_length=1, max_length=MAX_SESSION_ID_LENGTH)
    episode_id: EpisodeId
    task_id: TaskId | None = None
    task_data: dict[str, Any] = Field(default_factory=dict)

    def episode_key(self) -> dict[str, Any]:
        """What a re-seed must repeat to be the same episode (anything else is a conflict)."""
        return self.model_dump(mode="json", include={"episode_id", "task_id", "task_data"})


class ResourcesSeedSessionResponse(BaseSeedSessionResponse):
    """Answer to an episode seed; ``observation`` is on the wire only when set (even as None); extra fields kept."""

    model_config = ConfigDict(extra="allow")

    resources_session_id: str
    observation: str | None = None

    @model_serializer(mode="wrap")
    def _omit_unset_observation(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        if "observation" not in self.model_fields_set:
            data.pop("observation", None)
        return data


class ResourcesCloseSessionRequest(BaseModel):
    """Body of ``/close_session``; without ``resources_session_id`` it closes the cookie's session."""

    resources_session_id: str | None = Field(None, min_length=1, max_length=MAX_SESSION_ID_LENGTH)
    episode_id: EpisodeId | None = None


class ResourcesCloseSessionResponse(BaseModel):
    resources_session_id: str
