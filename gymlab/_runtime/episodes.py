"""``EpisodeSessions``: the episode-session rules around a server's seed and release hooks (one seed or
close at a time, idempotent re-seeds, one release then a fence, idle sessions reaped; docs/runtime.md)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import Request

from gymlab.errors import ResourcesReleaseFailedError, ResourcesSessionConflictError
from gymlab.fences import DEFAULT_WINDOW_SECONDS, ResourcesSessionFences
from gymlab.locks import ResourcesSessionLocks
from gymlab.protocol.resources import SESSION_ID_KEY
from gymlab.protocol.sessions import (
    ResourcesCloseSessionRequest,
    ResourcesCloseSessionResponse,
    ResourcesSeedSessionRequest,
    ResourcesSeedSessionResponse,
)

log = logging.getLogger("gymlab.server")

Release = Callable[[str], Awaitable[Any]]


class ReleaseRequest(str):
    """The session ID a release hook receives, also usable as the reference's close body."""

    resources_session_id: str
    episode_id: Any

    def __new__(cls, session_id: str, episode_id: Any = None) -> ReleaseRequest:
        obj = super().__new__(cls, session_id)
        obj.resources_session_id, obj.episode_id = str(session_id), episode_id
        return obj

    def model_dump(self, **_: Any) -> dict[str, Any]:
        episode = self.episode_id.model_dump(mode="json") if hasattr(self.episode_id, "model_dump") else self.episode_id
        return {"resources_session_id": self.resources_session_id, "episode_id": episode}


class EpisodeSessions:
    """One server's open episode sessions (ID -> seeding episode, seed answer); ``reap`` frees idle ones."""

    def __init__(
        self,
        window_seconds: float = DEFAULT_WINDOW_SECONDS,
        ttl_seconds: float | None = None,
        release: Release | None = None,
        clock: Callable[[], float] = time.monotonic,
        *,
        id_name: str = "resources_session_id",
        answers: tuple[Callable[[str, Any], dict], Callable[[str], dict]] | None = None,
    ) -> None:
        #: The body key naming a session, and ``(seed_answer(id, hook_result), close_answer(id))``.
        self.id_name = id_name
        self._seed_answer, self._close_answer = answers or (seed_answer, _close_answer)
        self.locks = ResourcesSessionLocks()
        self.fences = ResourcesSessionFences(window_seconds, clock=clock)
        self._open: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
        self._seen: OrderedDict[str, float] = OrderedDict()  # held sessions, least recently used first
        self._flat: set[str] = set()
        self._busy: dict[str, int] = {}  # session id -> requests in flight
        #: The server's ``session_state``: per-episode state, dropped by ``release_state``.
        self.state: dict[str, Any] = {}
        self.ttl_seconds = float(ttl_seconds) if ttl_seconds else None
        self.release, self._clock = release, clock
        self.reaped = self.reap_failures = 0
        self._last_sweep = clock()

    def _touch(self, session_id: str) -> None:
        self._seen[session_id] = self._clock()
        self._seen.move_to_end(session_id)

    def is_open(self, session_id: str) -> bool:
        return session_id in self._open

    def __len__(self) -> int:
        return len(self._open)

    def counts(self) -> dict[str, Any]:
        return {
            "open": len(self._open),
            "held": len(self._seen),
            "reaped": self.reaped,
            "reap_failures": self.reap_failures,
            "fenced": len(self.fences),
            "ttl_seconds": self.ttl_seconds,
        }

    def begin(self, session_id: str) -> None:
        """A request naming ``session_id`` started: the reaper leaves it alone until it ends."""
        self._busy[session_id] = self._busy.get(session_id, 0) + 1

    def end(self, session_id: str) -> None:
        """A request naming ``session_id`` ended: its idle time starts now."""
        left = self._busy.pop(session_id, 1) - 1
        if left:
            self._busy[session_id] = left
        if session_id in self._seen:
            self._touch(session_id)

    def foreign_seed(self, key: str, session_id: str) -> bool:
        """Whether a seed naming ``session_id`` by ``key`` without its cookie would take over a live episode."""
        if session_id in self._open:
            return key != self.id_name
        return session_id in self._seen

    def track_flat(self, session_id: str) -> None:
        """A flat-row seed opened ``session_id``: held until its verify or close."""
        if session_id not in self._open:
            self._flat.add(session_id)
            self._touch(session_id)

    def flat_released(self, session_id: str) -> None:
        """A flat-row session's state was released (its verify, a terminal step)."""
        if session_id in self._flat:
            self.forget(session_id)

    def forget(self, session_id: str) -> None:
        """The server released ``session_id`` itself (a Gymnasium episode that ended)."""
        self._open.pop(session_id, None)
        self._seen.pop(session_id, None)
        self._flat.discard(session_id)

    async def release_state(
        self, session_id: str, hook: Release, state: dict[str, Any], failure: BaseException | None = None
    ) -> None:
        """``hook(session_id)``, then ``state[session_id]`` dropped (a raising hook leaves it; noted on ``failure``)."""
        try:
            await hook(session_id)
        except Exception as exc:
            if failure is None:
                raise
            log.error("%s(%r) failed while handling %r", hook.__qualname__, session_id, failure, exc_info=exc)
            failure.add_note(f"{hook.__name__}({session_id!r}) also failed: {type(exc).__name__}: {exc}")
            return
        state.pop(session_id, None)
        self.flat_released(session_id)

    async def seed(self, body: ResourcesSeedSessionRequest, run: Callable[[], Awaitable[Any]]) -> dict[str, Any]:
        """Seed ``body``'s session with ``run()`` (its answer normalised); the answer's JSON."""
        sid = getattr(body, self.id_name)
        await self.maybe_reap()
        async with self.locks(sid):
            left = self.fences.remaining(sid)
            if left is not None:
                raise ResourcesSessionConflictError(
                    f"session {sid!r} was closed; a seed after its close is refused for {left:.0f} more "
                    f"seconds. Seed a new episode with a fresh {self.id_name}"
                )
            key = body.episode_key()
            opened = self._open.get(sid)
            if opened is not None:
                if opened[0] != key:
                    raise ResourcesSessionConflictError(
                        f"session {sid!r} is bound to episode {opened[0]['episode_id']} of task "
                        f"{opened[0]['task_id']}; this seed is for episode {key['episode_id']} of task "
                        f"{key['task_id']}. Use a fresh {self.id_name} for a new episode"
                    )
                return opened[1]
            answer = self._seed_answer(sid, await run())
            self._open[sid] = (key, answer)
            self._flat.discard(sid)
            self._touch(sid)
            return answer

    async def close(self, body: ResourcesCloseSessionRequest, release: Release) -> dict[str, Any]:
        """Release ``body``'s session once, then fence it; a release that raises leaves it open for a retry."""
        sid = getattr(body, self.id_name)
        async with self.locks(sid):
            opened = self._open.get(sid)
            if opened is not None and body.episode_id is not None:
                bound = opened[0]["episode_id"]
                if bound != body.episode_id.model_dump(mode="json"):
                    raise ResourcesSessionConflictError(
                        f"session {sid!r} is bound to episode {bound}, not {body.episode_id.model_dump()}; "
                        f"close the episode's own {self.id_name}"
                    )
            if sid not in self.fences:
                try:
                    await release(ReleaseRequest(sid, body.episode_id))
                except Exception as exc:
                    log.error("releasing session %r raised", sid, exc_info=exc)
                    raise ResourcesReleaseFailedError(
                        f"releasing session {sid!r} raised {type(exc).__name__}: {exc}; the session is still "
                        "held and not closed: retry the close, which runs the release again"
                    ) from exc
                self.forget(sid)
                self.fences.fence(sid)
            return self._close_answer(sid)

    @contextlib.asynccontextmanager
    async def reaping(self, name: str) -> AsyncIterator[None]:
        """A lifespan part: the idle-session reaper runs as a task from server ``name``'s startup to its stop."""

        async def forever() -> None:
            while True:
                await asyncio.sleep(min(self.sweep_interval(), 1.0))  # a changed ttl_seconds applies within 1 s
                try:
                    await self.maybe_reap()
                except Exception:  # the next sweep tries again; a crashed reaper would free nothing
                    log.exception("%s: the idle-session reaper failed", name)

        task = asyncio.get_running_loop().create_task(forever())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    def sweep_interval(self) -> float:
        return min(self.ttl_seconds / 4, 30.0) if self.ttl_seconds else 30.0

    async def maybe_reap(self) -> int:
        """``reap`` when a sweep is due (cheap to call on every seed)."""
        if not self.ttl_seconds or self._clock() - self._last_sweep < self.sweep_interval():
            return 0
        return await self.reap()

    async def reap(self) -> int:
        """Release and fence every session idle for ``ttl_seconds``; how many. A failed release is retried later."""
        if not self.ttl_seconds or self.release is None:
            return 0
        now = self._last_sweep = self._clock()
        cutoff = now - self.ttl_seconds
        idle = itertools.takewhile(lambda held: held[1] <= cutoff, self._seen.items())  # least recent first
        expired = [sid for sid, _ in idle if sid not in self._busy]
        released = 0
        for i, sid in enumerate(expired):
            if i % 500 == 499:
                await asyncio.sleep(0)  # let requests in between
            async with self.locks(sid):
                seen = self._seen.get(sid)
                if seen is None or seen > cutoff or sid in self._busy:
                    continue  # closed or used meanwhile
                try:
                    await self.release(ReleaseRequest(sid))
                except Exception as exc:
                    log.error("reaping idle session %r: its release raised", sid, exc_info=exc)
                    self.reap_failures += 1
                    self._touch(sid)
                    continue
                self.forget(sid)
                self.fences.fence(sid)
                released += 1
        self.reaped += released
        if released:
            log.warning("reaped %d sessions idle for over %.0f s (no close arrived)", released, self.ttl_seconds)
        return released


def seed_answer(session_id: str, answer: Any) -> dict[str, Any]:
    """A seed hook's return value as an episode seed's answer."""
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


def _close_answer(session_id: str) -> dict[str, Any]:
    return ResourcesCloseSessionResponse(resources_session_id=session_id).model_dump(mode="json")


def with_cookie_session(request: Any, body: ResourcesCloseSessionRequest) -> ResourcesCloseSessionRequest:
    """``body`` naming the cookie's session when it names none."""
    if body.resources_session_id is not None:
        return body
    return body.model_copy(update={"resources_session_id": request.session[SESSION_ID_KEY]})


def mount_episode_routes(
    app: Any,
    episodes: EpisodeSessions,
    seed: Callable[[ResourcesSeedSessionRequest], Awaitable[Any]],
    release: Callable[[str], Awaitable[Any]],
) -> None:
    """``/seed_session`` (``seed(body)``) and ``/close_session`` (``release(id)``) for a Gymnasium server."""
    from fastapi.responses import JSONResponse

    async def seed_session(body: ResourcesSeedSessionRequest) -> ResourcesSeedSessionResponse:
        return JSONResponse(await episodes.seed(body, lambda: seed(body)))

    async def close_session(request: Request, body: ResourcesCloseSessionRequest) -> ResourcesCloseSessionResponse:
        return await episodes.close(with_cookie_session(request, body), release)

    app.post("/seed_session")(seed_session)
    app.post("/close_session")(close_session)
