"""Interactive episodes: step an environment by hand or by model, fork it, grade it, release it.

``lab.episode(server_or_agent, row)`` returns a ``SeedVerifyEpisode`` or a ``GymnasiumEpisode``
(chosen from the environment's routes). Model turns go through ``gymlab.loop``, the same code the
agent servers run. Every method has a sync form and an ``a``-prefixed async form; sync forms run on
gymlab's background loop, so they work in a kernel, a script and pytest alike. An episode that is
closed, or dropped without closing, releases its server session exactly once.
"""

from __future__ import annotations

import abc
import functools
import json
import threading
import time
import warnings
import weakref
from typing import Any, Awaitable, Callable, NamedTuple

from gymlab._sync import background_loop, on_background_loop, run_sync
from gymlab.client import Cookies, ask_model_server, error_message, post, post_ok
from gymlab.errors import GymlabError, ServerError
from gymlab.loop import DEFAULT_MAX_STEPS, RESERVED_ROUTES, LoopState, model_turn, refusal, run_loop, with_user_message
from gymlab.protocol import (
    Message,
    NeMoGymResponse,
    ResponseCreateParams,
    Rollout,
    StepRecord,
    assistant_message,
    function_call,
)
from gymlab.protocol import record as records
from gymlab.protocol.resources import AgentRunRequest, dump_row


class EpisodeError(GymlabError):
    """Raised when an episode is used out of order (acting before seeding, after closing, ...)."""


class ForkDivergedError(GymlabError):
    """Raised when replaying an episode into a new session gives a different result at some step."""

    def __init__(self, env: str, step: int, what: str, expected: Any, got: Any):
        self.env, self.step, self.what, self.expected, self.got = env, step, what, expected, got
        super().__init__(
            f"{env}: fork diverged at step {step}: {what} was {_short(expected)} originally but "
            f"{_short(got)} on replay; fork needs an environment that is deterministic given the row"
        )


def _short(value: Any, n: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= n else text[: n - 3] + "..."


def parse_output(text: str) -> Any:
    """A tool output as JSON when it is JSON, else the text."""
    try:
        return json.loads(text)
    except (TypeError, ValueError):
        return text


def _on_gymlab_loop(fn):
    """Run an async method on gymlab's loop whichever loop awaits it (a kernel's, ``asyncio.run``'s),
    so no caller's loop ends up owning the connection pool."""

    @functools.wraps(fn)
    async def method(*args, **kwargs):
        return await on_background_loop(fn(*args, **kwargs))

    return method


class _synced:
    """``ep.name(...)`` as the sync form of ``ep.aname(...)``."""

    def __set_name__(self, owner, name):
        self.name = name

    def __get__(self, obj, owner):
        if obj is None:
            return self
        coro_fn = getattr(obj, "a" + self.name)

        def method(*args, **kwargs):
            return run_sync(coro_fn(*args, **kwargs))

        method.__name__ = self.name
        method.__doc__ = f"Sync form of ``a{self.name}``: {coro_fn.__doc__ or ''}"
        return method


class _Session:
    """The server-side session of one episode and how to release it; the finalizer holds this, not the episode."""

    def __init__(self, release: Callable[["_Session"], Awaitable[Any]], env: str):
        self.cookies = Cookies()
        self.open = False
        self.release_coro = release
        self.env = env
        self._lock = threading.Lock()

    def take(self) -> bool:
        """True exactly once per opened session: the caller then releases it."""
        with self._lock:
            was_open, self.open = self.open, False
            return was_open

    async def arelease(self) -> Any:
        if self.take():
            return await self.release_coro(self)
        return None


def _release_dropped(session: _Session) -> None:
    """Finalizer: release a dropped episode's session from whatever thread the collector runs in."""
    if not session.open:
        return
    loop = background_loop()
    if threading.current_thread().name == "gymlab-sync":
        loop.create_task(_release_quietly(session))
        return
    try:
        run_sync(session.arelease(), timeout=10)
    except Exception as exc:  # a finalizer cannot raise; say what happened instead
        warnings.warn(f"{session.env}: releasing a dropped episode's session failed: {exc}", RuntimeWarning)


async def _release_quietly(session: _Session) -> None:
    try:
        await session.arelease()
    except Exception as exc:
        warnings.warn(f"{session.env}: releasing a dropped episode's session failed: {exc}", RuntimeWarning)


class Episode(abc.ABC):
    """One episode against a served environment, driven by hand or by a model.

    Built by ``lab.episode(server_or_agent, row, model=...)``; ``history``, ``steps``, ``frame``
    and ``rollout`` describe it at any point. Use it as a context manager, or call ``close()``.
    """

    protocol = ""
    #: Seconds one model call may take (the agent servers' default).
    model_timeout_s: float | None = 300.0
    _start_name = ""  # the method that opens the server session
    _other_protocol_methods: frozenset[str] = frozenset()
    _closed = False

    def __init__(self, env_url: str, row: dict[str, Any], *, env_name: str = "", model_url: str | None = None,
                 model_name: str = "", agent_name: str = "", env_server: Any = None, max_steps: int | None = None):
        request = AgentRunRequest.model_validate(row)
        self.row = dump_row(request)
        self.params: ResponseCreateParams = request.responses_create_params
        self.env_url, self.env_name = env_url, env_name or env_url
        self.model_url, self.model_name = model_url, model_name or (model_url or "")
        self.agent_name = agent_name
        self.env_server = env_server
        self.max_steps = max_steps
        self.steps: list[StepRecord] = []
        self.result: dict[str, Any] | None = None
        self._actions: list[tuple[str, Any]] = []
        self._started = time.perf_counter()
        self._init_protocol()
        self._session = _Session(self._make_release(), self.env_name)
        self._finalizer = weakref.finalize(self, _release_dropped, self._session)

    def _init_protocol(self) -> None:
        """Set up the protocol's own state (before the session exists)."""

    @abc.abstractmethod
    def _make_release(self) -> Callable[[_Session], Awaitable[Any]]:
        """The coroutine that releases the session; it must not hold the episode (the finalizer runs it)."""

    # -- plumbing shared by both protocols ---------------------------------------------------

    def _spawn(self) -> "Episode":
        return type(self)(self.env_url, self.row, env_name=self.env_name, model_url=self.model_url,
                          model_name=self.model_name, agent_name=self.agent_name, env_server=self.env_server,
                          max_steps=self.max_steps)

    async def _env(self, path: str, body: Any) -> Any:
        return await post_ok(self.env_url, path, body, self._session.cookies, server=self.env_name)

    async def call_model(self, body: dict) -> NeMoGymResponse:
        """Ask the episode's model server for a response to ``body``."""
        if not self.model_url:
            raise EpisodeError(f"{self.env_name}: this episode has no model; pass model= to lab.episode "
                               "(a model server handle or URL) or act by hand")
        return await ask_model_server(self.model_url, body, server=self.model_name, timeout=self.model_timeout_s)

    def _require_open(self, action: str) -> None:
        if not self._session.open:
            if self.result is not None or self._closed:
                raise EpisodeError(f"{self.env_name}: the episode is finished; {action} needs a new one "
                                   "(lab.episode(...)) or a branch of this one (ep.fork())")
            raise EpisodeError(f"{self.env_name}: the episode has not started; call {self._start_name}() first")

    @property
    def reward(self) -> float:
        """The reward so far (summed over steps)."""
        return float(sum(s.reward for s in self.steps))

    @property
    def done(self) -> bool:
        return self._closed or self.result is not None

    @property
    def frame(self):
        """The steps so far as a pandas frame (``gymlab.lab.frames.steps_frame``)."""
        from gymlab.lab.frames import steps_frame

        return steps_frame([self.rollout])

    @_on_gymlab_loop
    async def aclose(self) -> None:
        """Release the server session now (idempotent); the episode keeps its history."""
        self._closed = True
        self._finalizer.detach()
        await self._session.arelease()

    close = _synced()

    def __enter__(self) -> "Episode":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    async def __aenter__(self) -> "Episode":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()

    @_on_gymlab_loop
    async def afork(self) -> "Episode":
        """A new session with this episode's actions replayed; it then continues independently.

        Raises ``ForkDivergedError`` (naming the step) when the replay gives other results.
        """
        branch = self._spawn()
        try:
            await branch._replay(self)
        except BaseException:
            await branch.aclose()
            raise
        return branch

    fork = _synced()

    def __getattr__(self, name: str) -> Any:
        if name in type(self)._other_protocol_methods:
            raise AttributeError(
                f"{self.env_name} speaks {self.protocol}; {name}() belongs to the other protocol "
                f"({'reset/step' if self.protocol == 'seed/verify' else 'seed/call/say/model_turn/verify'})"
            )
        raise AttributeError(f"{type(self).__name__!s} has no attribute {name!r}")

    def _repr_html_(self) -> str:
        from gymlab.lab.display import episode_html

        return episode_html(self)

    def __repr__(self) -> str:
        state = "finished" if self.done else ("open" if self._session.open else "not started")
        return (f"<{type(self).__name__} {self.env_name} {state}, {len(self.steps)} steps, "
                f"reward {self.reward:g}>")


class SeedVerifyEpisode(Episode):
    """A seed/verify episode: ``seed()``, then ``call``/``say``/``model_turn``/``run``, then ``verify()``."""

    protocol = "seed/verify"
    _start_name = "seed"
    _other_protocol_methods = frozenset({"reset", "areset", "step", "astep"})

    def _init_protocol(self) -> None:
        self.state = LoopState(self.params)
        self.steps = self.state.steps

    @property
    def history(self) -> list[Any]:
        """Every item of the conversation so far: the row's input, then what the episode added."""
        return self.state.items

    def tool_caller(self, statuses: list[int] | None = None):
        """A ``call_tool`` for the loop: POST /{name} with the episode's cookie; the body is the output."""

        async def call_tool(name: str, args: Any) -> str:
            reply = await post(self.env_url, f"/{name}", args, self._session.cookies, server=self.env_name)
            if statuses is not None:
                statuses.append(reply.status)
            return reply.text

        return call_tool

    @_on_gymlab_loop
    async def aseed(self) -> dict[str, Any]:
        """POST /seed_session with the row; returns the server's answer."""
        if self._session.open or self.done:
            raise EpisodeError(f"{self.env_name}: the episode is already seeded; use ep.fork() or a new lab.episode(...)")
        answer = await self._env("/seed_session", self.row)
        self._session.open = True
        self._started = time.perf_counter()
        return answer

    seed = _synced()

    async def _turn(self, response: NeMoGymResponse, call_tool=None, *, by_hand: bool = False) -> StepRecord:
        """Push ``response`` through the loop as if the model had answered it (``by_hand``: a call the
        researcher made, which may name a tool the row does not declare)."""

        async def canned(_body: dict) -> NeMoGymResponse:
            return response

        await model_turn(self.state, canned, call_tool or self.tool_caller(), check_tools=not by_hand)
        self._actions.append(("call" if by_hand else "response", response))
        return self.state.steps[-1]

    @_on_gymlab_loop
    async def acall(self, tool: str, /, **arguments: Any) -> Any:
        """Call tool route ``/{tool}`` by hand, as if the model had; returns the output (JSON-decoded).

        The call and its output join the conversation (and so the verify). An error status raises
        ``ServerError`` and records nothing.
        """
        self._require_open(f"call({tool!r})")
        if tool in RESERVED_ROUTES or refusal(tool, [tool]) is not None:
            raise EpisodeError(f"{self.env_name}: {tool!r} is not a tool route (a lifecycle route, or not a plain "
                               "name); use the episode's own methods (seed, verify, close) for those")
        reply = await post(self.env_url, f"/{tool}", arguments, self._session.cookies, server=self.env_name)
        if not reply.ok:
            raise ServerError(self.env_name, f"POST /{tool}", reply.status, error_message(reply.text),
                              "the call was not recorded; check the tool name and arguments")

        async def recorded(_name: str, _args: Any) -> str:
            return reply.text

        await self._turn(NeMoGymResponse(model="by hand", output=[function_call(tool, arguments)]), recorded,
                         by_hand=True)
        return parse_output(reply.text)

    call = _synced()

    @_on_gymlab_loop
    async def asay(self, text: str, role: str = "assistant") -> Message:
        """Add a message: the assistant's (a final answer, as a model turn) or the user's (a follow-up)."""
        self._require_open("say()")
        if role == "assistant":
            await self._turn(NeMoGymResponse(model="by hand", output=[assistant_message(text)]))
            return self.state.added[-1]
        message = Message(role=role, content=text)
        self.state.added.append(message)
        self._actions.append(("message", message))
        return message

    say = _synced()

    @_on_gymlab_loop
    async def amodel_turn(self) -> StepRecord:
        """One model call and each of its tool calls (``gymlab.loop.model_turn``); returns the step."""
        self._require_open("model_turn()")
        turn = await model_turn(self.state, self.call_model, self.tool_caller())
        self._actions.append(("response", turn.response))
        return self.state.steps[-1]

    model_turn = _synced()

    @_on_gymlab_loop
    async def arun(self, max_steps: int | None = None) -> list[StepRecord]:
        """Model turns until the loop's stop rules end the episode (``gymlab.loop.run_loop``)."""
        self._require_open("run()")
        before = len(self.state.steps)
        limit = max_steps if max_steps is not None else (self.max_steps or DEFAULT_MAX_STEPS)
        limit = None if limit is None else before + limit
        await run_loop(self.params, self._recording_model, self.tool_caller(), limit, self.state)
        return self.state.steps[before:]

    run = _synced()

    async def _recording_model(self, body: dict) -> NeMoGymResponse:
        response = await self.call_model(body)
        self._actions.append(("response", response))
        return response

    def _make_release(self):
        url, name, row, state = self.env_url, self.env_name, self.row, self.state

        async def verify(session: _Session) -> dict[str, Any]:
            response = state.final_response().model_dump(mode="json", exclude_none=True)
            return await post_ok(url, "/verify", {**row, "response": response}, session.cookies, server=name)

        return verify

    @_on_gymlab_loop
    async def averify(self) -> Rollout:
        """POST /verify with the conversation so far; ends the episode and returns its rollout."""
        self._require_open("verify()")
        self._finalizer.detach()
        if not self._session.take():
            raise EpisodeError(f"{self.env_name}: the episode was closed while verifying")
        try:
            result = await self._session.release_coro(self._session)
        except BaseException:
            self._closed = True
            raise
        self.result = result
        return self.rollout

    verify = _synced()

    @property
    def rollout(self) -> Rollout:
        """The episode as a rollout record (the verify's answer once verified)."""
        record = records.verified(self.result, self.state.steps, self.state.stop_reason,
                                  time.perf_counter() - self._started, row=self.row,
                                  response=self.state.final_response())
        return records.with_identity(record, agent=self.agent_name or None, env=self.env_name)

    async def _replay(self, original: "SeedVerifyEpisode") -> None:
        await self.aseed()
        for index, (kind, action) in enumerate(original._actions):
            if kind == "message":
                self.state.added.append(action)
                self._actions.append((kind, action))
                continue
            step = await self._turn(action, by_hand=kind == "call")
            recorded = original.state.steps[step.index]
            for old, new in zip(recorded.tool_outputs, step.tool_outputs):
                if old.output != new.output:
                    call = next((c for c in action.function_calls if c.call_id == old.call_id), None)
                    what = f"the output of tool {call.name if call else '?'}"
                    raise ForkDivergedError(self.env_name, step.index, what, old.output, new.output)



class Step(NamedTuple):
    """What a Gymnasium step returns, in Gymnasium's order."""

    observation: str | None
    reward: float
    terminated: bool
    truncated: bool
    info: dict[str, Any]


def as_response(action: Any = None, call: str | None = None, arguments: Any = None) -> NeMoGymResponse | None:
    """An action as the model response ``/step`` takes; None means "ask the model".

    Accepted: assistant text, ``(name, arguments)``, ``call=``/``arguments=``, an item or a list of
    items, a response (or its JSON).
    """
    if call is not None:
        if action is not None:
            raise TypeError("give the action or call=..., not both")
        action = (call, arguments or {})
    if action is None:
        return None
    if isinstance(action, NeMoGymResponse):
        return action
    if isinstance(action, dict):
        return NeMoGymResponse.model_validate(action)
    if isinstance(action, str):
        items = [assistant_message(action)]
    elif isinstance(action, tuple) and len(action) == 2 and isinstance(action[0], str):
        items = [function_call(action[0], action[1] if action[1] is not None else {})]
    elif isinstance(action, list):
        items = action
    elif hasattr(action, "type"):
        items = [action]
    else:
        raise TypeError(f"an action is text, (name, arguments), an item, a list of items or a response; "
                        f"got {type(action).__name__}")
    return NeMoGymResponse(model="by hand", output=items)


class GymnasiumEpisode(Episode):
    """A Gymnasium episode: ``reset()``, then ``step(action)`` until terminated or truncated.

    ``step()`` with no action asks the model; each step returns ``Step(observation, reward,
    terminated, truncated, info)``. Tool outputs and observations join the conversation exactly as
    ``gymnasium_agent`` adds them, so a model sees the same history here as in a run.
    """

    protocol = "gymnasium"
    _start_name = "reset"
    _other_protocol_methods = frozenset({"seed", "aseed", "call", "acall", "say", "asay", "model_turn",
                                         "amodel_turn", "verify", "averify"})

    def _init_protocol(self) -> None:
        self.state = LoopState(self.params)
        self.steps = self.state.steps
        self.observation: str | None = None
        self.reset_info: dict[str, Any] = {}
        self.reset_observation: str | None = None
        self.last_step: Any = None

    @property
    def history(self) -> list[Any]:
        """Every item of the conversation so far (the reset observation is the first user message)."""
        return self.state.items

    def _make_release(self):
        url, name = self.env_url, self.env_name

        async def close(session: _Session) -> Any:
            reply = await post(url, "/close", {}, session.cookies, server=name)
            if reply.status == 404:
                warnings.warn(f"{name}: has no /close route, so an unfinished episode's state stays on the server "
                              "until the server reclaims it", RuntimeWarning)
                return None
            if not reply.ok:
                raise ServerError(name, "POST /close", reply.status, error_message(reply.text))
            return reply.json()

        return close

    @_on_gymlab_loop
    async def areset(self) -> tuple[str | None, dict[str, Any]]:
        """POST /reset with the row; returns ``(observation, info)``."""
        from gymlab.protocol.gymnasium import GymnasiumResetResponse

        if self._session.open or self.done:
            raise EpisodeError(f"{self.env_name}: the episode is already reset; use ep.fork() or a new lab.episode(...)")
        reset = GymnasiumResetResponse.model_validate(await self._env("/reset", self.row))
        self._session.open = True
        self._started = time.perf_counter()
        self.state.params = with_user_message(self.params, reset.observation)
        self.observation, self.reset_info = reset.observation, reset.info
        self.reset_observation = reset.observation
        return reset.observation, reset.info

    reset = _synced()

    @_on_gymlab_loop
    async def astep(self, action: Any = None, *, call: str | None = None, arguments: Any = None) -> Step:
        """One transition: the action (or the model's answer) to ``/step``; returns the ``Step``."""
        from gymlab.loop import ask_model, gymnasium_transition
        from gymlab.protocol.gymnasium import GymnasiumStepResponse

        self._require_open("step()")
        given = as_response(action, call, arguments)
        t0 = time.perf_counter()

        async def canned(_body: dict) -> NeMoGymResponse:
            return given

        response = await ask_model(self.state, self.call_model if given is None else canned)
        self._actions.append(("response", response))
        body = {**self.row, "response": response.model_dump(mode="json", exclude_none=True)}
        try:
            answer = GymnasiumStepResponse.model_validate(await self._env("/step", body))
        except ServerError:
            self._closed = True  # the server released the state of a step that raised
            self._session.take()
            self._finalizer.detach()
            raise
        record = gymnasium_transition(self.state, response, answer, time.perf_counter() - t0)
        self.last_step, self.observation = answer, answer.observation
        if answer.terminated or answer.truncated:
            self._session.take()  # the server released the state itself
            self._finalizer.detach()
            self.result = {}
        else:
            if self.max_steps is not None and len(self.steps) >= self.max_steps:
                record.truncated = True
                self.state.stop_reason = "max_steps"
                self.result = {}
                await self.aclose()
        return Step(answer.observation, answer.reward, record.terminated, record.truncated, answer.info)

    step = _synced()

    @_on_gymlab_loop
    async def arun(self, max_steps: int | None = None) -> list[StepRecord]:
        """Model steps until the episode ends (or ``max_steps`` more steps); returns the new steps."""
        before = len(self.steps)
        limit = max_steps if max_steps is not None else (self.max_steps or DEFAULT_MAX_STEPS)
        while not self.done and len(self.steps) - before < limit:
            await self.astep()
        return self.steps[before:]

    run = _synced()

    @property
    def rollout(self) -> Rollout:
        """The episode as a rollout record, with the fields ``gymnasium_agent`` reports."""
        record = records.from_transitions(self.state.params, self.state.final_response(), self.steps,
                                          cut_by_limit=self.state.stop_reason == "max_steps", row=self.row,
                                          last=self.last_step, duration_s=time.perf_counter() - self._started)
        return records.with_identity(record, agent=self.agent_name or None, env=self.env_name)

    async def _replay(self, original: "GymnasiumEpisode") -> None:
        observation, _ = await self.areset()
        if observation != original.reset_observation:
            raise ForkDivergedError(self.env_name, 0, "the reset observation", original.reset_observation, observation)
        for _kind, response in original._actions:
            await self.astep(response)
            old, new = original.steps[len(self.steps) - 1], self.steps[-1]
            for what, a, b in (("the observation", old.observation, new.observation),
                               ("the reward", old.reward, new.reward),
                               ("terminated", old.terminated, new.terminated),
                               ("truncated", old.truncated, new.truncated),
                               ("the tool outputs", [o.output for o in old.tool_outputs],
                                [o.output for o in new.tool_outputs])):
                if a != b:
                    raise ForkDivergedError(self.env_name, new.index, what, a, b)

def _protocol_of(server: Any, agent: Any) -> str:
    """'seed/verify' or 'gymnasium', from the environment's routes (or the agent's kind if it is remote)."""
    if server is not None:
        paths = {getattr(r, "path", None) for r in server.app.routes}
        if "/seed_session" in paths and "/verify" in paths:
            return "seed/verify"
        if "/reset" in paths and "/step" in paths:
            return "gymnasium"
        raise EpisodeError(f"{server.name}: serves neither /seed_session+/verify nor /reset+/step; "
                           "lab.episode needs a resources server (SimpleResourcesServer or GymnasiumServer)")
    return "gymnasium" if "gymnasium" in type(agent).__name__.lower() else "seed/verify"


def open_episode(lab: Any, target: Any, row: dict[str, Any], *, model: Any = None,
                 max_steps: int | None = None) -> Episode:
    """The episode ``Lab.episode`` returns: ``target`` is a resources server handle or an agent handle."""
    from gymlab.lab.lab import AgentHandle, ServerHandle

    by_url = {h.url: h for h in lab.servers.values()}
    agent, agent_name = None, ""
    if isinstance(target, AgentHandle):
        agent, agent_name = target.server, target.name
        env_url = getattr(agent, "resources_server", "")
        if not env_url:
            raise EpisodeError(f"{target.name}: the agent has no resources_server; serve it with resources=...")
        model = model if model is not None else (getattr(agent, "model_server", "") or None)
        if max_steps is None:
            max_steps = getattr(agent, "max_steps", None)
        env_handle = by_url.get(env_url)
    elif isinstance(target, ServerHandle):
        env_url, env_handle = target.url, target
    else:
        raise TypeError(f"lab.episode takes a server handle or an agent handle (from lab.serve / lab.serve_agent), "
                        f"not {type(target).__name__}")
    if isinstance(model, str):
        model_url, model_name = model, getattr(by_url.get(model), "name", model)
    elif model is not None:
        model_url, model_name = model.url, model.name
    else:
        model_url, model_name = None, ""
    server = env_handle.server if env_handle is not None else None
    protocol = _protocol_of(server, agent)
    cls = SeedVerifyEpisode if protocol == "seed/verify" else _gymnasium_episode_class()
    return cls(env_url, row, env_name=env_handle.name if env_handle else env_url, model_url=model_url,
               model_name=model_name, agent_name=agent_name, env_server=server, max_steps=max_steps)


def _gymnasium_episode_class() -> type[Episode]:
    return GymnasiumEpisode
