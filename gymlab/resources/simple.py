"""SimpleResourcesServer: the seed/verify protocol, extended with tool routes by subclasses."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import math
import statistics
import typing
import warnings
from abc import abstractmethod
from collections import defaultdict
from collections.abc import Callable, Iterable
from typing import Any, ClassVar

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import Field, PrivateAttr, ValidationError

from gymlab._runtime.app import on_stop
from gymlab._runtime.bodies import BODY_KEY, close_follows, parsed_body
from gymlab._runtime.episodes import EpisodeSessions, with_cookie_session
from gymlab._runtime.offload import WorkerPool
from gymlab.errors import WorkBudgetExceeded
from gymlab.protocol import (
    SESSION_ID_KEY,
    AggregateMetrics,
    AggregateMetricsRequest,
    BaseSeedSessionRequest,
    BaseSeedSessionResponse,
    BaseVerifyRequest,
    BaseVerifyResponse,
    ResourcesCloseSessionRequest,
    ResourcesCloseSessionResponse,
    ResourcesSeedSessionRequest,
)
from gymlab.resources.tools import type_hints as _hints
from gymlab.rewards.rubric import GRADING_FAILURES, grading_failure, masked_fields, verify_answer
from gymlab.server import BaseServer

#: The failure kind of a verify for a session the server no longer holds.
SESSION_LOST = "session_lost"

# The reference's idiom declares ``session_state: dict = Field(...)`` on its server: the base's, still freed.
warnings.filterwarnings("ignore", r'Field name "session_state" in ".*" shadows an attribute in parent', UserWarning)


def reward_stats(rewards: list[float]) -> dict[str, float]:
    """mean/max/min/median/std of rewards (population std), scaled by a power of two so none overflows."""
    if not rewards:
        return {}
    n, ordered = len(rewards), sorted(rewards)
    exponent = math.frexp(max(-ordered[0], ordered[-1]))[1]
    scaled = [math.ldexp(r, -exponent) for r in ordered]
    mean, median = math.fsum(scaled) / n, statistics.median(scaled)
    return {
        "mean/reward": math.ldexp(mean, exponent),
        "max/reward": ordered[-1],
        "min/reward": ordered[0],
        "median/reward": math.ldexp(median, exponent),
        "std/reward": math.ldexp(math.sqrt(math.fsum((r - mean) ** 2 for r in scaled) / n), exponent),
    }


class MetricsTally:
    """The default aggregate metrics, one verify response at a time (docs/servers.md)."""

    def __init__(self) -> None:
        self.n_samples = 0
        self.groups: dict[int | None, list[float]] = defaultdict(list)  # task index -> rewards of kept samples
        self.errors: list[dict[str, Any]] = []

    def add(self, r: dict[str, Any]) -> None:
        i, errors = self.n_samples, self.errors
        self.n_samples += 1
        if len(errors) >= 20:
            return
        mask, index = r.get("mask_sample"), r.get("_ng_task_index")
        reward = 0.0 if mask is True else _finite(r.get("reward", 0.0))
        found = len(errors)
        if mask is not None and not isinstance(mask, bool):
            errors.append(_unreadable(i, "mask_sample", mask, "a boolean (or null)"))
        if index is not None and (isinstance(index, bool) or not isinstance(index, int)):
            errors.append(_unreadable(i, "_ng_task_index", index, "an integer (or null)"))
        if reward is None:
            errors.append(_unreadable(i, "reward", r.get("reward"), "a finite number (a masked sample may omit it)"))
        if reward is not None and mask is not True and len(errors) == found:
            self.groups[index].append(reward)

    def result(self) -> AggregateMetrics:
        if self.errors:
            raise RequestValidationError(self.errors)
        groups = self.groups
        rewards = [reward for group in groups.values() for reward in group]
        agent = reward_stats(rewards)
        agent["num_samples"] = self.n_samples
        agent["num_masked"] = self.n_samples - len(rewards)
        group_level = [
            {"_ng_task_index": k, "num_rollouts": len(v), **reward_stats(v)}
            for k, v in sorted(groups.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))
        ]
        key = {k: agent[k] for k in ("mean/reward",) if k in agent}
        if groups:
            key["pass@k/mean"] = statistics.fmean(float(max(v) >= 1.0) for v in groups.values())
        return AggregateMetrics(agent_metrics=agent, key_metrics=key, group_level_metrics=group_level)


def aggregate_metrics(verify_responses: Iterable[dict[str, Any]]) -> AggregateMetrics:
    """Metrics over verify responses (``MetricsTally``)."""
    tally = MetricsTally()
    for r in verify_responses:
        tally.add(r)
    return tally.result()


def default_metrics(server: Any) -> bool:
    """Whether ``server`` answers ``/aggregate_metrics`` with the default metrics (``MetricsTally``)."""
    return getattr(type(server), "aggregate_metrics", None) is SimpleResourcesServer.aggregate_metrics


def _finite(value: Any) -> float | None:
    """``value`` as a finite float, or None (not a JSON number, or past the float range)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    with contextlib.suppress(OverflowError):
        if math.isfinite(value := float(value)):
            return value
    return None


def _unreadable(i: int, key: str, value: Any, expected: str) -> dict[str, Any]:
    return {
        "type": "value_error",
        "loc": ("body", "verify_responses", i, key),
        "msg": f"verify_responses[{i}].{key} is {repr(value)[:60]}; expected {expected}",
    }  # no "input": the value is named above, cut short, so a huge one is not sent back


class EpisodeServer(BaseServer):
    """A server whose per-episode state is ``session_state``; CPU-heavy work goes to ``offload``."""

    work_processes: int = Field(
        default=2, ge=1, description="Worker processes for offload(): CPU-heavy grading, off the event loop."
    )
    work_budget_seconds: float = Field(
        default=60.0, gt=0, description="Time budget of one offload() call or one sync hook (verify, step, ...)."
    )
    _episodes: EpisodeSessions | None = PrivateAttr(default=None)
    _work: WorkerPool | None = PrivateAttr(default=None)

    async def offload(
        self, fn: Callable[..., Any], *args: Any, budget_s: float | None = None, prepare: tuple | None = None
    ) -> Any:
        """``fn(*args)`` in a worker process within ``budget_s`` (``WorkerPool.run``; docs/servers.md)."""
        budget_s = self.work_budget_seconds if budget_s is None else budget_s
        return await self.worker_pool().run(
            fn, *args, budget_s=budget_s, prepare=prepare, prepare_s=self.work_budget_seconds
        )

    def worker_pool(self) -> WorkerPool:
        if self._work is None:
            self._work = WorkerPool(self.work_processes, name=self.name, recycle_rss_bytes=self.worker_rss_limit())
        return self._work

    def worker_rss_limit(self) -> int | None:
        """Resident bytes past which a worker exits after answering (None: never)."""
        return None

    def lifespan_parts(self) -> list[contextlib.AbstractAsyncContextManager]:
        return [*super().lifespan_parts(), on_stop(self.close_work)]  # the server stops: its worker processes too

    def close_work(self) -> None:
        work, self._work = self._work, None
        if work is not None:
            work.close()

    async def call_hook(self, hook: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``hook(...)``: awaited, or a sync one in a thread within ``work_budget_seconds``."""
        if inspect.iscoroutinefunction(hook):
            return await hook(*args, **kwargs)
        try:
            return await asyncio.wait_for(asyncio.to_thread(hook, *args, **kwargs), self.work_budget_seconds)
        except TimeoutError:
            raise WorkBudgetExceeded(
                f"{self.name}: {getattr(hook, '__qualname__', hook)} ran past its budget of "
                f"{self.work_budget_seconds:g} s (work_budget_seconds)",
                self.work_budget_seconds,
            ) from None

    @property
    def episode_sessions(self) -> EpisodeSessions:
        if self._episodes is None:
            self._episodes = EpisodeSessions(
                self.session_close_retry_window_seconds, self.session_ttl_seconds, self._reap
            )
        return self._episodes

    @property
    def session_state(self) -> dict[str, Any]:
        """Per-episode state, keyed by session id."""
        return self.episode_sessions.state


class SimpleResourcesServer(EpisodeServer):
    """Seed/verify environment: override ``verify`` (and ``seed_session``, its state in ``session_state``)."""

    #: Private dicts that hold no episode's state (a bounded cache), which ``release_gap`` lets be.
    not_episode_state: ClassVar[tuple[str, ...]] = ()
    serve_mcp: bool = Field(
        default=False,
        description="Also serve the tool routes as MCP tools at /mcp (streamable HTTP; needs gymlab[mcp]).",
    )
    mcp_max_sessions: int = Field(default=1000, ge=1, description="Most /mcp sessions open at once (LRU idle evicted).")
    mcp_session_ttl_seconds: float = Field(default=600.0, gt=0, description="An /mcp session idle this long ends.")
    _mcp: Any = PrivateAttr(default=None)  # the /mcp endpoint (McpTools), its session manager a lifespan part

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/seed_session")(_episode_aware(self.seed_session, self.episode_sessions, self.call_hook))
        app.post("/close_session")(self._close_session_route)
        app.post("/verify")(with_request(self.verify, self._verify_then_release, self.call_hook))
        app.post("/aggregate_metrics")(self.aggregate_metrics)
        if self.serve_mcp:  # off by default: nothing of MCP is imported, mounted or run
            from gymlab.resources.mcp_tools import mount_mcp

            self._mcp = mount_mcp(app, self)
        return app

    def lifespan_parts(self) -> list[contextlib.AbstractAsyncContextManager]:
        parts = super().lifespan_parts()
        return [*parts, self._mcp.running()] if self._mcp is not None else parts

    async def seed_session(self, body: ResourcesSeedSessionRequest | BaseSeedSessionRequest) -> BaseSeedSessionResponse:
        """Initialise an episode; the default does nothing."""
        return BaseSeedSessionResponse()

    async def close_resources_session(self, resources_session_id: str) -> None:
        """Release an episode's external resources; ``session_state`` is dropped once it returns."""

    @abstractmethod
    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        """Grade the completed trajectory."""

    async def aggregate_metrics(self, body: AggregateMetricsRequest) -> AggregateMetrics:
        """``aggregate_metrics`` in a thread: a large run's answers do not stall the server."""

        def answer() -> Response:
            metrics = aggregate_metrics(body.verify_responses).model_dump(mode="json")
            return Response(orjson.dumps(metrics), media_type="application/json")

        return await asyncio.to_thread(answer)

    async def _close_session_route(
        self, request: Request, body: ResourcesCloseSessionRequest
    ) -> ResourcesCloseSessionResponse:
        return await self.episode_sessions.close(with_cookie_session(request, body), self._release)

    async def _release(self, session_id: str) -> None:
        await self.episode_sessions.release_state(session_id, self.close_resources_session, self.session_state)

    _reap = _release

    async def _verify_then_release(self, request: Request, call):
        """``/verify``, then the episode's state released: it is over unless a close follows."""
        sid = request.session.get(SESSION_ID_KEY)
        try:
            return await call()
        except GRADING_FAILURES as exc:  # the model's own 0, or the grader's failure masked (docs/servers.md)
            answer = verify_answer(_body_of(call), {"reward": 0.0, **grading_failure(exc)}, _EchoedVerifyResponse)
            return JSONResponse(answer.model_dump(mode="json"))
        finally:
            if sid in self.session_state and not close_follows(request.scope.get(BODY_KEY)):
                await self._release(sid)


def release_gap(server: BaseServer) -> str | None:
    """Why a server's per-episode state may outlive its episodes (a private dict only verify frees), or None."""
    cls = type(server)
    if not isinstance(server, SimpleResourcesServer) or any(
        "close_resources_session" in vars(c) for c in cls.__mro__[: cls.__mro__.index(SimpleResourcesServer)]
    ):
        return None
    own = SimpleResourcesServer.__private_attributes__
    maps = [
        n
        for n, v in (server.__pydantic_private__ or {}).items()
        if n not in own and n not in cls.not_episode_state and isinstance(v, dict)
    ]
    if not maps:
        return None
    return (
        f"{cls.__name__} keeps per-episode state in {', '.join(maps)}, which nothing releases when an episode "
        "is cancelled, fails or is abandoned: keep it in self.session_state (released after verify, on "
        "close, on a cancel and by the idle reaper), or override close_resources_session to release it"
    )


def row_problems(server: SimpleResourcesServer, rows: list[dict[str, Any]]) -> list[str]:
    """Rows checked against the ``seed_session`` and ``verify`` bodies: one line per problem, typos named."""
    import difflib

    from gymlab.protocol.validation import describe_validation

    found: dict[str, list[int]] = {}
    for route, hook, extra in (("/seed_session", server.seed_session, {}), ("/verify", server.verify, _RESPONSE)):
        adapter = _body_adapter(hook)
        for index, row in enumerate(rows if adapter is not None else ()):
            if not (isinstance(row, dict) and "responses_create_params" in row):
                continue  # not a row an agent sends as the body (a wrapped task of another agent's)
            try:
                adapter.validate_python({**row, **extra})
            except ValidationError as exc:
                for e in exc.errors(include_url=False):
                    guess = difflib.get_close_matches(str(e["loc"][-1]), list(row), 1) if e["loc"] else []
                    hint = f" (the row has {guess[0]!r}: a typo?)" if e["type"] == "missing" and guess else ""
                    found.setdefault(f"{route} {describe_validation([e], 'the row')}{hint}", []).append(index)
    return [f"{problem} in rows {', '.join(map(str, idx[:5]))}{'…' * (len(idx) > 5)}" for problem, idx in found.items()]


_RESPONSE: dict[str, Any] = {"response": {"output": []}}  # what the agent adds to a row for /verify


def _body_adapter(hook):
    """A ``TypeAdapter`` of ``hook``'s body, or None (no fields); a union's episode-seed form is left out."""
    from pydantic import BaseModel, TypeAdapter

    for name, hint in _hints(hook).items():
        members = [m for m in typing.get_args(hint) or (hint,) if m is not ResourcesSeedSessionRequest]
        if name != "return" and members and all(isinstance(m, type) and issubclass(m, BaseModel) for m in members):
            if not any(m.model_fields for m in members):
                return None
            return TypeAdapter(members[0] if len(members) == 1 else typing.Union[tuple(members)])  # noqa: UP007
    return None


def lost_session_verification(body: BaseVerifyRequest, reason: str = "") -> BaseVerifyResponse:
    """The masked ``/verify`` answer for a session the server no longer holds (``session_lost``)."""
    reason = reason or "the server no longer holds this session (closed, expired or restarted)"
    return masked_verification(body, SESSION_LOST, reason)


def masked_verification(body: BaseVerifyRequest, kind: str, reason: str) -> BaseVerifyResponse:
    """A masked ``/verify`` answer of failure ``kind`` (infrastructure: not a real zero); ``body`` echoed."""
    return verify_answer(body, {"reward": 0.0, **masked_fields(kind, reason)}, _EchoedVerifyResponse)


def _body_of(call) -> Any:
    """The request body among a route call's arguments."""
    return next(v for v in call.keywords.values() if isinstance(v, BaseVerifyRequest))


class _EchoedVerifyResponse(BaseVerifyResponse, extra="allow"):
    """A verify answer that keeps the request's own fields, so a subclass response model validates it."""


def with_request(hook, run, invoke):
    """An endpoint with ``hook``'s signature (plus the Request) answered by ``run(request, call)``, where
    ``call()`` is ``invoke(hook, ...)`` with the request's arguments."""
    signature, hints = inspect.signature(hook), _hints(hook)
    params = [p.replace(annotation=hints.get(p.name, p.annotation)) for p in signature.parameters.values()]
    params = _typed(hook, params)
    own = next((p.name for p in params if p.annotation is Request), None)
    if own is None:
        params.append(inspect.Parameter("_gymlab_request", inspect.Parameter.KEYWORD_ONLY, annotation=Request))

    @functools.wraps(hook)
    async def endpoint(**kwargs):
        request: Request = kwargs[own] if own is not None else kwargs.pop("_gymlab_request")
        return await run(request, functools.partial(invoke, hook, **kwargs))

    returns = hints.get("return", signature.return_annotation)
    endpoint.__signature__ = signature.replace(parameters=params, return_annotation=returns)
    return endpoint


def _base_hints(hook) -> dict[str, Any]:
    """The annotations of the method ``hook`` overrides (its name on a base class of its server)."""
    owner, name = getattr(hook, "__self__", None), getattr(hook, "__name__", "")
    for base in type(owner).__mro__[1:] if owner is not None else ():
        if (method := base.__dict__.get(name)) is not None:
            return {k: v for k, v in _hints(method).items() if k != "return"}
    return {}


def _typed(hook, params: list[inspect.Parameter]) -> list[inspect.Parameter]:
    """``params`` with each unannotated one typed (the Request, or the overridden body), else a ``TypeError``."""
    untyped = [p for p in params if p.annotation is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    bodies = [p for p in untyped if p.name != "request"]
    base = [t for t in _base_hints(hook).values() if t is not Request] if bodies else []
    if bodies and not (len(base) == 1 and len(bodies) == 1):
        owner, name = type(getattr(hook, "__self__", None)).__name__, getattr(hook, "__name__", "the hook")
        raise TypeError(
            f"{owner}.{name}: parameter {bodies[0].name!r} has no type annotation, so every request would fail "
            f"(FastAPI reads it as a query parameter); annotate it: `{bodies[0].name}: YourRequestModel` "
            "(a pydantic model of the body) or `request: Request`"
        )
    typed = {p.name: Request if p.name == "request" else base[0] for p in untyped}
    return [p.replace(annotation=typed.get(p.name, p.annotation)) for p in params]


def _episode_aware(seed_session, episodes: EpisodeSessions, invoke):
    """``seed_session`` as ``/seed_session`` under the episode-session rules (the raw body tells the form)."""

    async def seed(request: Request, call):
        body = request.scope.get(BODY_KEY)
        try:  # parsed once, on the way in
            raw = parsed_body(request.scope, await request.body() if body is None else body)
        except (ValueError, RecursionError):
            raw = None
        if not (isinstance(raw, dict) and "resources_session_id" in raw):
            answer = await call()
            episodes.track_flat(request.session[SESSION_ID_KEY])  # held until its verify or close
            return answer
        try:
            body = ResourcesSeedSessionRequest.model_validate(raw)
        except ValidationError as exc:
            raise RequestValidationError(
                [{**e, "loc": ("body", *e["loc"])} for e in exc.errors(include_url=False)]
            ) from None
        return JSONResponse(await episodes.seed(body, call))

    return with_request(seed_session, seed, invoke)
