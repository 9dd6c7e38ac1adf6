"""What every agent server shares, and the one episode life cycle (``BaseAgent.run_episode``; docs/servers.md)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr
from starlette.middleware import Middleware

from gymlab._http.client import Cookies
from gymlab._http.retry import retried, retrying
from gymlab._runtime.app import on_stop
from gymlab._runtime.bodies import error_response
from gymlab._runtime.episodes import EpisodeSessions
from gymlab._runtime.hangup import CancelOnHangup
from gymlab.errors import EpisodeFailed, ServerError, TransportError
from gymlab.failures import Role, failure_of
from gymlab.loop import DEFAULT_MAX_STEPS, EpisodeSession
from gymlab.protocol import NeMoGymResponse
from gymlab.protocol import record as records
from gymlab.protocol.agent_sessions import (
    CLOSE_ROUTE,
    SEED_ROUTE,
    AgentCloseSessionRequest,
    AgentCloseSessionResponse,
    AgentSeedSessionRequest,
    AgentSeedSessionResponse,
)
from gymlab.protocol.failure_kinds import Stage
from gymlab.protocol.record import Rollout, StepRecord
from gymlab.protocol.resources import AgentRunRequest, AggregateMetrics, AggregateMetricsRequest, dump_row  # noqa: F401
from gymlab.resources.simple import aggregate_metrics as default_metrics
from gymlab.server import BaseServer

log = logging.getLogger("gymlab.server")


class Timeouts(BaseModel):
    """Seconds each hop of an episode may take before it fails with ``transport_timeout`` (None: no bound)."""

    model_config = ConfigDict(extra="forbid")

    model: float | None = Field(300.0, gt=0, description="One model call.")
    tool: float | None = Field(120.0, gt=0, description="One tool call to the resources server.")
    seed: float | None = Field(120.0, gt=0, description="/seed_session or /reset.")
    verify: float | None = Field(300.0, gt=0, description="/verify.")
    step: float | None = Field(120.0, gt=0, description="One Gymnasium /step.")
    cleanup: float | None = Field(30.0, gt=0, description="Releasing a session after a failure.")
    episode: float | None = Field(1800.0, gt=0, description="A whole /run.")


@dataclass(slots=True)
class EpisodeRun:
    """One ``/run`` in progress: the row, its cookies, the stage it is at, the session it holds."""

    row: dict[str, Any]
    stage: Stage = "seed"
    cookies: Cookies = field(default_factory=Cookies)
    session: EpisodeSession | None = None
    steps: list[StepRecord] = field(default_factory=list)  # the steps so far, which a failure after them carries
    started: float = field(default_factory=time.perf_counter)

    def elapsed(self) -> float:
        return time.perf_counter() - self.started


class ReleaseRetries:
    """Session releases that failed, retried in the background with backoff; given up: the reaper frees it."""

    def __init__(self, name: str, attempts: int = 6, first_delay: float = 0.5, limit: int = 4096):
        self.name, self.attempts, self.first_delay, self.limit = name, attempts, first_delay, limit
        self.released = self.given_up = 0
        self._tasks: set[asyncio.Task] = set()

    def counts(self) -> dict[str, int]:
        return {"pending": len(self._tasks), "released": self.released, "given_up": self.given_up}

    def add(self, session: EpisodeSession, timeout: float | None) -> None:
        """Retry ``session``'s release later (its first attempt already failed)."""
        if len(self._tasks) >= self.limit:
            self._give_up(session, f"{self.limit} releases already wait for a retry")
            return
        task = asyncio.get_running_loop().create_task(self._retry(session, timeout))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _retry(self, session: EpisodeSession, timeout: float | None) -> None:
        def again(exc: Exception, n: int) -> float | None:
            ok = n < self.attempts and isinstance(exc, ServerError) and retryable(exc)
            return self.first_delay * 2**n if ok else None

        await asyncio.sleep(self.first_delay)
        try:
            await retrying(lambda: session.send_release(timeout), again)
        except ServerError as exc:
            self._give_up(session, str(exc))
            return
        self.released += 1
        log.info("%s: released %s %s on a retry", self.name, session.url, session.release_path)

    def _give_up(self, session: EpisodeSession, why: str) -> None:
        self.given_up += 1
        log.error(
            "%s: gave up releasing a session of %s (%s); its idle-session reaper frees it", self.name, session.url, why
        )

    async def aclose(self) -> None:
        """Stop the retries (the server is shutting down); what they held is left to the reapers."""
        tasks, self._tasks = list(self._tasks), set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def retryable(exc: ServerError) -> bool:
    """A release failure a later attempt may fix, by its kind (``gymlab._http.retry.retried``)."""
    return retried(failure_of(exc, role="resources", stage="cleanup").kind, release=True)


class BaseAgent(BaseServer):
    """An agent server bound to a model server (and usually a resources server), by URL."""

    model_server: str = ""
    resources_server: str = ""
    max_steps: int | None = Field(DEFAULT_MAX_STEPS, ge=1, description="Model calls per episode (None: no limit).")
    timeouts: Timeouts = Field(default_factory=Timeouts)
    skip_verification: bool = Field(
        False,
        description="Grade nothing: the record's reward is skip_verification_reward and verification_skipped "
        "is true (NeMo Gym's option; agents that verify only).",
    )
    skip_verification_reward: float = Field(0.0, description="The reward of an episode under skip_verification.")

    #: Whether this agent grades episodes with ``/verify`` (``skip_verification`` applies to it).
    verifies: ClassVar[bool] = True
    #: Statuses of a refused seed that keep their status (a 4xx no retry can fix) instead of a 502.
    seed_refusals: ClassVar[frozenset[int]] = frozenset()

    _episodes: Any = PrivateAttr(default=None)
    _session_state: dict[str, Any] = PrivateAttr(default_factory=dict)
    _release_retries: ReleaseRetries = PrivateAttr()

    def model_post_init(self, __context: Any) -> None:
        super().model_post_init(__context)
        self._release_retries = ReleaseRetries(self.name)
        if self.skip_verification and not self.verifies:
            raise ValueError(
                f"{type(self).__name__} never calls /verify (its rewards come from the environment's steps), "
                "so skip_verification does not apply to it; leave it false"
            )

    @property
    def session_state(self) -> dict[str, Any]:
        """Per-agent-session state, keyed by ``agent_session_id``: process state, never config."""
        return self._session_state

    @property
    def release_retries(self) -> ReleaseRetries:
        """The session releases that failed and wait for a retry."""
        return self._release_retries

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()

        async def seed(body: AgentSeedSessionRequest) -> AgentSeedSessionResponse:
            return JSONResponse(await self.episode_sessions.seed(body, lambda: self.seed_agent_session(body)))

        async def close(body: AgentCloseSessionRequest) -> AgentCloseSessionResponse:
            return JSONResponse(await self.episode_sessions.close(body, self.episode_sessions.release))

        app.post(SEED_ROUTE, response_model=AgentSeedSessionResponse)(seed)
        app.post(CLOSE_ROUTE, response_model=AgentCloseSessionResponse)(close)
        app.post("/aggregate_metrics")(self.aggregate_metrics)
        app.exception_handler(EpisodeFailed)(episode_failed)
        return app

    def middleware_parts(self) -> list[Middleware]:
        # a caller that hangs up stops its episode and frees its session
        return [*super().middleware_parts(), Middleware(CancelOnHangup)]

    def lifespan_parts(self) -> list[contextlib.AbstractAsyncContextManager]:
        return [*super().lifespan_parts(), on_stop(self.release_retries.aclose)]  # before the client closes

    @property
    def episode_sessions(self):
        """This agent's open agent sessions, locks, fences and idle reaper."""
        if self._episodes is None:
            self._episodes = EpisodeSessions(
                self.session_close_retry_window_seconds,
                self.session_ttl_seconds,
                lambda sid: self.close_agent_session(str(sid)),
                id_name="agent_session_id",
                answers=(lambda sid, _: {"agent_session_id": sid}, lambda sid: {"agent_session_id": sid}),
            )
        return self._episodes

    async def seed_agent_session(self, body: AgentSeedSessionRequest) -> None:
        """Set up a session's state under ``body.agent_session_id`` (once per session); the default keeps none."""

    async def close_agent_session(self, agent_session_id: str) -> None:
        """Release an agent session's state (once per close; also for an ID that was never seeded)."""
        self.session_state.pop(agent_session_id, None)

    async def call_model(self, body: dict) -> NeMoGymResponse:
        """The model's response to ``body``; a failure carries a model-provider kind."""
        if not self.model_server:
            raise self._unbound("POST /v1/responses", "model_server", "model")
        with typed("model"):
            return await self.client.ask_model(self.model_server, body, timeout=self.timeouts.model)

    def _resources(self, path: str) -> str:
        if not self.resources_server:
            raise self._unbound(f"POST {path}", "resources_server", "resources")
        return self.resources_server

    def _unbound(self, route: str, key: str, argument: str) -> ServerError:
        hint = f"pass {argument}= to serve_agent or set {key} in the config"
        return ServerError(self.name, route, 0, f"no {key} configured", hint)

    async def post_resources(self, path: str, body: Any, cookies: Cookies | None, timeout: float | None) -> Any:
        """POST to the bound resources server; an error status raises ``ServerError``."""
        url = self._resources(path)
        with typed("resources", "verification" if path == "/verify" else None):
            return await self.client.post_ok(url, path, body, cookies, server="resources server", timeout=timeout)

    async def grade(self, run: EpisodeRun, body: dict[str, Any], cookies: Cookies) -> dict[str, Any]:
        """The verify answer for ``body``; a 413 is the policy's 0, ``skip_verification`` grades nothing."""
        run.stage = "verification"
        graded = {k: v for k, v in body.items() if k != "close_follows"}
        if self.skip_verification:
            return {**graded, "reward": self.skip_verification_reward, "verification_skipped": True}
        try:
            answer = await self.post_resources("/verify", body, cookies, self.timeouts.verify)
        except ServerError as exc:
            if exc.status != 413:
                raise
            return {**graded, "reward": 0.0, "response_too_large": str(exc)}
        if not body.get("close_follows") and run.session is not None:
            run.session.ended()
        return answer

    async def aggregate_metrics(self, body: AggregateMetricsRequest) -> AggregateMetrics:
        """A run's metrics, proxied to the resources server, else computed here (docs/servers.md)."""
        if self.skip_verification:
            return AggregateMetrics()
        if not self.resources_server:
            return await asyncio.to_thread(default_metrics, body.verify_responses)
        route = "POST /aggregate_metrics"
        try:
            answer = await self.post_resources(
                "/aggregate_metrics", body.model_dump(mode="json"), None, self.timeouts.verify
            )
            return AggregateMetrics.model_validate(answer)
        except ServerError as exc:
            if exc.status == 404:
                return await asyncio.to_thread(default_metrics, body.verify_responses)
            if 400 <= exc.status < 500:
                raise HTTPException(
                    exc.status, f"{self.name}: {route}: the resources server refused it: {exc}"
                ) from exc
            cause: Exception | str = exc
        except ValueError as exc:
            cause = f"its answer is not an aggregate-metrics object: {str(exc).splitlines()[0]}"
        raise HTTPException(
            502,
            f"{self.name}: {route} is answered by the resources server {self.resources_server}, "
            f"which failed: {cause}. Is it running, and is resources_server right?",
        )

    async def run_episode(self, row: dict[str, Any], play: Callable[[EpisodeRun], Awaitable[Rollout]]) -> Response:
        """The one episode life cycle of every agent; ``play(run)`` is its own loop (docs/servers.md)."""
        run = EpisodeRun(row)
        try:
            async with asyncio.timeout(self.timeouts.episode):
                record = await play(run)
        except BaseException as exc:
            gone = await self._release(run, exc)
            if not isinstance(exc, (ServerError, TimeoutError)):
                raise
            failure = failure_of(exc, role="agent", stage=run.stage)
            if gone is not None and isinstance(exc, TransportError):
                # a hop dropped and the release found the session gone (the spec's 410: its worker died)
                failure = failure_of(gone, role="resources", stage=run.stage)
            if failure.kind == "session_lost":  # a masked record (200): the episode cannot be replayed
                return record_response(records.failed(row, failure, duration_s=run.elapsed(), steps=run.steps))
            if run.stage == "seed" and isinstance(exc, ServerError) and exc.status in self.seed_refusals:
                raise HTTPException(exc.status, f"{self.name}: {with_notes(str(exc), exc)}") from exc
            raise self.episode_failed(exc, run.stage, run.steps) from exc
        await self._release(run)
        if not isinstance(record, Rollout):
            raise TypeError(f"{type(self).__name__}'s episode must return a Rollout, got {type(record).__name__}")
        return record_response(record)

    async def open_session(
        self,
        run: EpisodeRun,
        path: str,
        body: Any,
        release_path: str,
        release_body: dict[str, Any] | None = None,
    ) -> Any:
        """Seed (or reset) the episode's session; held from the moment the request goes out, unless refused 409."""
        url = self._resources(path)
        run.session = EpisodeSession(
            self.client, url, release_path, server="resources server", cookies=run.cookies, release_body=release_body
        )
        run.session.open = True
        try:
            answer = await self.post_resources(path, body, run.cookies, self.timeouts.seed)
        except ServerError as exc:
            if exc.status == 409:
                run.session.open = False
            raise
        run.stage = "agent"
        return answer

    async def _release(self, run: EpisodeRun, failed: BaseException | None = None) -> ServerError | None:
        """Release the session ``run`` still holds, once; a failure is retried later; a 410 is returned."""
        session = run.session
        if session is None or not session.names_a_session() or not session.take():
            return None
        try:
            await asyncio.shield(session.send_release(self.timeouts.cleanup))
        except ServerError as exc:
            if exc.status == 410:
                return exc
            log.warning("%s: releasing %s %s failed: %s", self.name, session.url, session.release_path, exc)
            if failed is not None:
                failed.add_note(f"releasing the session ({session.release_path}) also failed: {exc}")
            if retryable(exc):
                self.release_retries.add(session, self.timeouts.cleanup)
        return None

    def episode_failed(self, exc: BaseException, stage: Stage, steps: Sequence[StepRecord] = ()) -> EpisodeFailed:
        """The 502 reporting ``exc`` at ``stage``: its typed failure, with the ``steps`` taken before it."""
        failure = failure_of(exc, role="agent", stage=stage)
        message = failure.message
        if isinstance(exc, TimeoutError) and not isinstance(exc, ServerError):
            message = f"the episode ran past timeouts.episode ({self.timeouts.episode:g} s) at stage {stage}"
        kept = [s.model_dump(mode="json", exclude_none=True) for s in steps] or None
        update = {"message": with_notes(message, exc), "steps": kept}
        return EpisodeFailed(self.name, "POST /run", failure.model_copy(update=update))


def with_notes(message: str, exc: BaseException) -> str:
    """``message`` with the notes added to ``exc`` (a release that also failed)."""
    return message + "".join(f"; {note}" for note in getattr(exc, "__notes__", ()))


@contextlib.contextmanager
def typed(role: Role, stage: Stage | None = None) -> Iterator[None]:
    """Give a ``ServerError`` raised inside the failure of a request to a ``role`` server."""
    try:
        yield
    except ServerError as exc:
        exc.failure = failure_of(exc, role=role, stage=stage)
        raise


async def episode_failed(request: Request, exc: EpisodeFailed) -> JSONResponse:
    fields = {"error": "EpisodeFailed", "hint": exc.hint or None, "failure": exc.failure}
    return error_response(exc.server, request.scope, 502, exc.cause, **fields)


def record_response(record: Rollout) -> Response:
    """A rollout as ``/run``'s answer, serialised once straight to JSON (failure keys null when unset, as NeMo Gym)."""
    return Response(records.record_json(record), media_type="application/json")
