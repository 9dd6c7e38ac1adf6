"""Interactive episodes (the base of ``SeedVerifyEpisode`` and ``GymnasiumEpisode``): step an environment by
hand or by model, fork it, grade it; closed or dropped, an episode releases its server session exactly once."""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
import time
import warnings
import weakref
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, NamedTuple

from gymlab._http.client import Client
from gymlab._sync import background_loop, on_background_loop, run_sync
from gymlab.errors import EpisodeError
from gymlab.lab.display import clip, episode_html, flags, step_html, step_summary
from gymlab.loop import DEFAULT_MAX_STEPS, EpisodeSession, LoopState
from gymlab.protocol import NeMoGymResponse, ResponseCreateParams, Rollout, StepRecord
from gymlab.protocol import record as records
from gymlab.protocol.resources import AgentRunRequest, dump_row


def answering(answer: Any):
    """A model or tool call that answers ``answer`` (an action given by hand, or its recorded output)."""

    async def call(*_: Any) -> Any:
        return answer

    return call


class _Transition(NamedTuple):
    observation: str | None
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


class Step(_Transition):
    """What a Gymnasium step returns, in Gymnasium's order (``obs, reward, terminated, truncated,
    info = ep.step(...)``), with the step's record (``record``: action, tool outputs) for display."""

    record: StepRecord | None = None

    def _repr_html_(self) -> str:
        return step_html(self.record, observation=self.observation)

    def __repr__(self) -> str:
        action = f"{step_summary(self.record)} -> " if self.record is not None else ""
        observation = f"; observation {clip(self.observation, 80)!r}" if self.observation else ""
        return f"<Step {action}reward {self.reward:g}{flags(self)}{observation}>"


def _add_sync_forms(cls: type) -> None:
    """Each public coroutine method ``aname`` of ``cls`` runs on gymlab's loop whichever loop awaits it (so
    no caller's loop owns the connection pool) and gets its sync form ``name`` (same signature and docstring)."""
    for attr, coro_fn in list(vars(cls).items()):
        if attr.startswith("a") and inspect.iscoroutinefunction(coro_fn):
            setattr(cls, attr, _on_gymlab_loop(coro_fn))
            setattr(cls, attr[1:], _sync_form(cls, attr, coro_fn))


def _on_gymlab_loop(fn):
    @functools.wraps(fn)
    async def method(*args, **kwargs):
        return await on_background_loop(fn(*args, **kwargs))

    return method


def _sync_form(cls: type, attr: str, coro_fn: Any):
    def method(self, *args, **kwargs):
        return run_sync(getattr(self, attr)(*args, **kwargs))

    method.__name__, method.__qualname__ = attr[1:], f"{cls.__qualname__}.{attr[1:]}"
    method.__doc__ = f"Sync form of ``{attr}``. {coro_fn.__doc__ or ''}".rstrip()
    method.__signature__ = inspect.signature(coro_fn)
    return method


class _Session(EpisodeSession):
    """The server session of one episode (the agents' own ``EpisodeSession``); the finalizer holds
    this, not the episode."""

    __slots__ = ()

    def missing_route(self) -> None:
        warnings.warn(
            f"{self.server}: has no {self.release_path} route, so an unfinished episode's state stays on the "
            "server until the server reclaims it",
            RuntimeWarning,
        )


def _release_dropped(session: _Session) -> None:
    """Finalizer: release a dropped episode's session from whatever thread the collector runs in."""

    async def release() -> None:
        try:
            await asyncio.wait_for(session.release(), 10)
        except Exception as exc:  # a finalizer cannot raise; say what happened instead
            warnings.warn(f"{session.server}: releasing a dropped episode's session failed: {exc}", RuntimeWarning)

    if not session.open:
        return
    if threading.current_thread().name == "gymlab-sync":
        background_loop().create_task(release())
    else:
        run_sync(release())


class Episode(AbstractContextManager, AbstractAsyncContextManager):
    """One episode against a served environment, driven by hand or by a model (``lab.episode(...)``);
    ``history``, ``steps``, ``frame`` and ``rollout`` describe it at any point. Use it as a context
    manager, or call ``close()``."""

    protocol = ""
    #: Seconds one model call may take (the agent servers' default).
    model_timeout_s: float | None = 300.0
    _start_name = ""  # the method that opens the server session
    _other_protocol_methods: frozenset[str] = frozenset()
    _closed = False

    def __init__(
        self,
        env_url: str,
        row: dict[str, Any],
        *,
        client: Client,
        env_name: str = "",
        model_url: str | None = None,
        model_name: str = "",
        agent_name: str = "",
        max_steps: int | None = None,
    ):
        request = AgentRunRequest.model_validate(row)
        self.row = dump_row(request)
        self.params: ResponseCreateParams = request.responses_create_params
        self.client, self.env_url, self.env_name = client, env_url, env_name or env_url
        self.model_url, self.model_name = model_url, model_name or (model_url or "")
        self.agent_name, self.max_steps = agent_name, max_steps
        self.state = LoopState(self.params)  # the conversation and its steps
        self.steps: list[StepRecord] = self.state.steps
        self.result: dict[str, Any] | None = None
        self._actions: list[tuple[str, Any]] = []
        self._started = time.perf_counter()
        self._session = self._make_session()
        self._finalizer = weakref.finalize(self, _release_dropped, self._session)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        _add_sync_forms(cls)

    @property
    def history(self) -> list[Any]:
        """Every item of the conversation so far: the row's input (in a Gymnasium episode the reset
        observation is the first user message), then what the episode added."""
        return self.state.items

    def _make_session(self) -> _Session:
        """The episode's session, released by ``/close``; it must not hold the episode (the finalizer releases it)."""
        return _Session(self.client, self.env_url, "/close", server=self.env_name)

    def _spawn(self) -> Episode:
        names = ("client", "env_name", "model_url", "model_name", "agent_name", "max_steps")
        return type(self)(self.env_url, self.row, **{n: getattr(self, n) for n in names})

    async def _env(self, path: str, body: Any) -> Any:
        return await self.client.post_ok(self.env_url, path, body, self._session.cookies, server=self.env_name)

    async def _start(self, path: str, done: str) -> Any:
        """POST ``path`` (the seed or the reset) with the row; the session is held from then on."""
        if self._session.open or self.done:
            raise EpisodeError(
                f"{self.env_name}: the episode is already {done}; use ep.fork() or a new lab.episode(...)"
            )
        answer = await self._env(path, self.row)
        self._session.open = True
        self._started = time.perf_counter()
        return answer

    def _step_limit(self, max_steps: int | None) -> int:
        return max_steps if max_steps is not None else (self.max_steps or DEFAULT_MAX_STEPS)

    async def call_model(self, body: dict) -> NeMoGymResponse:
        """Ask the episode's model server for a response to ``body``."""
        if not self.model_url:
            raise EpisodeError(
                f"{self.env_name}: this episode has no model; pass model= to lab.episode "
                "(a model server handle or URL) or act by hand"
            )
        return await self.client.ask_model(self.model_url, body, server=self.model_name, timeout=self.model_timeout_s)

    def _require_open(self, action: str) -> None:
        if not self._session.open:
            if self.result is not None or self._closed:
                raise EpisodeError(
                    f"{self.env_name}: the episode is finished; {action} needs a new one "
                    "(lab.episode(...)) or a branch of this one (ep.fork())"
                )
            raise EpisodeError(f"{self.env_name}: the episode has not started; call {self._start_name}() first")

    @property
    def reward(self) -> float:
        """The reward so far (summed over steps)."""
        return float(sum(s.reward for s in self.steps))

    @property
    def done(self) -> bool:
        return self._closed or self.result is not None

    @property
    def rollout(self) -> Rollout:
        """The episode as a rollout record, with the episode's agent and environment names."""
        return records.with_identity(self._record(), agent=self.agent_name or None, env=self.env_name)

    @property
    def frame(self):
        """The steps so far as a pandas frame (``gymlab.lab.frames.steps_frame``)."""
        from gymlab.lab.frames import steps_frame

        return steps_frame([self.rollout])

    async def aclose(self) -> None:
        """Release the server session now (idempotent); the episode keeps its history."""
        self._closed = True
        self._finalizer.detach()
        await self._session.release()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    async def afork(self) -> Episode:
        """A new session with this episode's actions replayed, then independent; ``ForkDivergedError``
        (naming the step) when the replay gives other results."""
        branch = self._spawn()
        try:
            await branch._replay(self)
        except BaseException:
            await branch.aclose()
            raise
        return branch

    def __getattr__(self, name: str) -> Any:
        if name in type(self)._other_protocol_methods:
            raise AttributeError(
                f"{self.env_name} speaks {self.protocol}; {name}() belongs to the other protocol "
                f"({'reset/step' if self.protocol == 'seed/verify' else 'seed/call/say/model_turn/verify'})"
            )
        raise AttributeError(f"{type(self).__name__!s} has no attribute {name!r}")

    def _repr_html_(self) -> str:
        return episode_html(self)

    def __repr__(self) -> str:
        state = "finished" if self.done else ("open" if self._session.open else "not started")
        return f"<{type(self).__name__} {self.env_name} {state}, {len(self.steps)} steps, reward {self.reward:g}>"


_add_sync_forms(Episode)
