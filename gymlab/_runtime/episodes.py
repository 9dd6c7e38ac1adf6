"""The episode-session rules a resources server keeps, whatever its protocol base.

``EpisodeSessions`` wraps a server's own seed and release hooks:

- a seed and the close of one session run one at a time (``ResourcesSessionLocks``);
- a re-seed of an open session by the same episode answers as the first seed did, without seeding
  again (a retry after a lost reply); by another episode it is refused with 409;
- a close releases the session once, fences it (``ResourcesSessionFences``) and answers every
  repeat the same way; a seed while the fence holds is refused with 409.
"""

from __future__ import annotations

from typing import Any, Awaitable, Callable

from gymlab._runtime.fences import DEFAULT_WINDOW_SECONDS, ResourcesSessionFences
from gymlab._runtime.locks import ResourcesSessionLocks
from gymlab.errors import ResourcesSessionConflictError
from gymlab.protocol.sessions import (
    ResourcesCloseSessionRequest,
    ResourcesCloseSessionResponse,
    ResourcesSeedSessionRequest,
    ResourcesSeedSessionResponse,
)


class EpisodeSessions:
    """Open episode sessions of one server: ID -> (the episode that seeded it, the seed's answer)."""

    def __init__(self, window_seconds: float = DEFAULT_WINDOW_SECONDS) -> None:
        self.locks = ResourcesSessionLocks()
        self.fences = ResourcesSessionFences(window_seconds)
        self._open: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}

    def is_open(self, session_id: str) -> bool:
        return session_id in self._open

    def __len__(self) -> int:
        return len(self._open)

    async def seed(
        self, body: ResourcesSeedSessionRequest, run: Callable[[], Awaitable[Any]]
    ) -> dict[str, Any]:
        """Seed ``body``'s session with ``run()`` (its answer normalised); the answer's JSON."""
        sid = body.resources_session_id
        async with self.locks(sid):
            left = self.fences.remaining(sid)
            if left is not None:
                raise ResourcesSessionConflictError(
                    f"session {sid!r} was closed; a seed after its close is refused for {left:.0f} more "
                    "seconds. Seed a new episode with a fresh resources_session_id"
                )
            key = body.episode_key()
            opened = self._open.get(sid)
            if opened is not None:
                if opened[0] != key:
                    raise ResourcesSessionConflictError(
                        f"session {sid!r} is bound to episode {opened[0]['episode_id']} of task "
                        f"{opened[0]['task_id']}; this seed is for episode {key['episode_id']} of task "
                        f"{key['task_id']}. Use a fresh resources_session_id for a new episode"
                    )
                return opened[1]
            answer = seed_answer(sid, await run())
            self._open[sid] = (key, answer)
            return answer

    async def close(
        self, body: ResourcesCloseSessionRequest, release: Callable[[str], Awaitable[Any]]
    ) -> dict[str, Any]:
        """Release ``body``'s session with ``release(id)`` once, then fence it; repeats are no-ops."""
        sid = body.resources_session_id
        async with self.locks(sid):
            opened = self._open.get(sid)
            if opened is not None and body.episode_id is not None:
                bound = opened[0]["episode_id"]
                if bound != body.episode_id.model_dump(mode="json"):
                    raise ResourcesSessionConflictError(
                        f"session {sid!r} is bound to episode {bound}, not {body.episode_id.model_dump()}; "
                        "close the episode's own resources_session_id"
                    )
            if sid not in self.fences:
                try:
                    await release(sid)
                finally:
                    self._open.pop(sid, None)
                    self.fences.fence(sid)
            return ResourcesCloseSessionResponse(resources_session_id=sid).model_dump(mode="json")


def seed_answer(session_id: str, answer: Any) -> dict[str, Any]:
    """A seed hook's return value as an episode seed's answer (``observation`` only when set)."""
    if answer is None:
        return ResourcesSeedSessionResponse(resources_session_id=session_id).model_dump(mode="json")
    if isinstance(answer, ResourcesSeedSessionResponse):
        response = answer
    else:
        fields = answer.model_dump(mode="json", exclude_unset=True) if hasattr(answer, "model_dump") else dict(answer)
        response = ResourcesSeedSessionResponse.model_validate({**fields, "resources_session_id": session_id})
    if response.resources_session_id != session_id:
        raise ValueError(
            f"the seed hook answered for session {response.resources_session_id!r}, but the seed is for "
            f"{session_id!r}; return ResourcesSeedSessionResponse(resources_session_id=body.resources_session_id)"
        )
    return response.model_dump(mode="json")


def mount_episode_routes(
    app: Any,
    episodes: EpisodeSessions,
    seed: Callable[[ResourcesSeedSessionRequest], Awaitable[Any]],
    release: Callable[[str], Awaitable[Any]],
) -> None:
    """Add ``/seed_session`` and ``/close_session`` to a server whose base has no episode sessions.

    ``seed(body)`` starts the episode (its answer may carry an ``observation``); ``release(id)``
    frees it. A Gymnasium server, for example: ``seed`` runs its reset with ``body.task_data`` as the
    metadata and returns the reset observation; ``release`` closes the episode.
    """
    from fastapi.responses import JSONResponse

    async def seed_session(body: ResourcesSeedSessionRequest) -> ResourcesSeedSessionResponse:
        return JSONResponse(await episodes.seed(body, lambda: seed(body)))

    async def close_session(body: ResourcesCloseSessionRequest) -> ResourcesCloseSessionResponse:
        return await episodes.close(body, release)

    app.post("/seed_session")(seed_session)
    app.post("/close_session")(close_session)
