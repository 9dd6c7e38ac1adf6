"""The model <-> tools loop as plain async functions over two coroutines (ask the model, run a tool), and
the server session an episode holds; agent servers and notebook episodes both use them."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from pydantic import ValidationError

from gymlab._http.client import Client, Cookies
from gymlab.errors import ServerError
from gymlab.protocol import (
    FunctionCall,
    FunctionCallOutput,
    Message,
    NeMoGymResponse,
    Reasoning,
    ResponseCreateParams,
    StepRecord,
    Usage,
    dump_item,
)
from gymlab.protocol.gymnasium import GymnasiumStepResponse
from gymlab.protocol.responses import read_arguments

ModelCall = Callable[[dict], Awaitable[NeMoGymResponse]]
ToolCall = Callable[[str, Any], Awaitable[str]]

#: Model calls per episode when nothing else is configured: a looping policy ends, truncated.
DEFAULT_MAX_STEPS = 32
#: Function calls one model answer may have run when nothing else is configured (an agent's
#: ``max_tool_calls_per_turn``): one answer of 20,000 calls must not make 20,000 tool requests.
DEFAULT_MAX_TOOL_CALLS_PER_TURN = 64

#: Routes of a resources server that are its lifecycle or built-ins, never a model's tool.
RESERVED_ROUTES = frozenset(
    "seed_session verify close_session reset step close aggregate_metrics health docs redoc openapi.json run v1 "
    "responses mcp".split()
)
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9_-]{1,128}$")


def refusal(name: str, declared: list[str]) -> str | None:
    """Why a function call named ``name`` must not reach ``POST /{name}``, or None when it may: only a
    declared tool, a plain route segment, and no lifecycle or built-in route (a model cannot seed,
    verify or close its own episode)."""
    if not isinstance(name, str) or not _PLAIN_NAME.match(name) or name in RESERVED_ROUTES:
        return f"tool {name!r} is not callable; declared: {', '.join(declared) or 'none'}"
    if name not in declared:
        return f"unknown tool {name!r}; declared: {', '.join(declared) or 'none'}"
    return None


@dataclass
class LoopState:
    """One episode's conversation so far: the authored input plus every item added; tool calls bounded per
    answer (``max_tool_calls_per_turn``) and per episode (the row's ``max_tool_calls``)."""

    params: ResponseCreateParams
    added: list[Any] = field(default_factory=list)
    steps: list[StepRecord] = field(default_factory=list)
    usage: Usage | None = None
    last: NeMoGymResponse | None = None
    stop_reason: str | None = None
    transition: GymnasiumStepResponse | None = None  # the last Gymnasium step's answer
    max_tool_calls_per_turn: int | None = DEFAULT_MAX_TOOL_CALLS_PER_TURN
    _wire: tuple[Any, dict] | None = field(default=None, repr=False, compare=False)

    @property
    def items(self) -> list[Any]:
        return self.params.input_items() + self.added

    def request_body(self) -> dict:
        """The body sent to a model server: the authored request (dumped once per episode), then the items added."""
        if self._wire is None or self._wire[0] is not self.params:
            base = self.params.model_dump(mode="json", exclude_unset=True)
            base["input"] = [dump_item(i) for i in self.params.input_items()]
            if self.params.tools:
                base["tools"] = [dump_item(t) for t in self.params.tools]
            self._wire = (self.params, base)
        base = self._wire[1]
        return {**base, "input": base["input"] + [dump_item(i) for i in self.added]}

    def tool_call_allowance(self) -> int | None:
        """How many function calls the next model answer may have run (None: no bound)."""
        caps = [self.max_tool_calls_per_turn]
        if self.params.max_tool_calls is not None:
            caps.append(max(0, self.params.max_tool_calls - sum(len(s.tool_outputs) for s in self.steps)))
        return min((c for c in caps if c is not None), default=None)

    def final_response(self) -> NeMoGymResponse:
        """The episode's response: the last model response, with every added item and summed usage."""
        base = self.last or NeMoGymResponse(output=[])
        update: dict[str, Any] = {"output": list(self.added), "usage": self.usage}
        if self.stop_reason in ("max_steps", "max_tool_calls", "conversation_too_large", "empty_output"):
            update["status"] = "incomplete"
            update["incomplete_details"] = base.incomplete_details or {"reason": self.stop_reason}
        return base.model_copy(update=update)


def stop_reason_of(response: NeMoGymResponse) -> str | None:
    """Why the loop stops after this response, or None to continue (the wire reference's rules)."""
    if response.incomplete_details:
        return "incomplete"
    if any(isinstance(i, FunctionCall) for i in response.output):
        return None
    if not response.output or all(isinstance(i, Reasoning) for i in response.output):
        return "empty_output"
    if any(isinstance(i, Message) for i in response.output):
        return "final_message"
    return "no_action"


async def ask_model(state: LoopState, call_model: ModelCall) -> NeMoGymResponse:
    """One model call on the conversation so far; its output items and usage join the state."""
    response = await call_model(state.request_body())
    state.last = response
    state.usage = response.usage if state.usage is None else state.usage + response.usage
    state.added.extend(response.output)
    return response


async def model_turn(
    state: LoopState, call_model: ModelCall, call_tool: ToolCall | None, *, check_tools: bool = True
) -> str | None:
    """One model call, then its function calls in order, as a step of ``state``; why the episode stops (None:
    it goes on). A refused call gets an error output, counted in ``tool_errors`` (``check_tools=False``: a
    call made by hand, no caps); calls past ``tool_call_allowance()`` are not run; without ``call_tool`` they
    are left to the caller (``tool_calls``: NeMo Gym's ``execute_tools: false``)."""
    t0 = time.perf_counter()
    response = await ask_model(state, call_model)
    outputs, refused = [], 0
    declared = [t.name for t in state.params.tools or () if getattr(t, "type", "function") == "function" and t.name]
    calls = [c for c in response.output if isinstance(c, FunctionCall)] if call_tool is not None else []
    allowed = state.tool_call_allowance() if check_tools else None
    for call in calls[:allowed]:
        why = refusal(call.name, declared) if check_tools else None
        refused += why is not None
        if why is None:  # arguments that are not JSON are the model's error too: nothing reaches the server
            try:
                args = read_arguments(call.arguments, max_chars=None)  # the tool server's body limit bounds them
            except ValueError as exc:
                why = f"Invalid tool call arguments: {exc}"
        output = json.dumps({"error": why}) if why is not None else await call_tool(call.name, args)
        outputs.append(FunctionCallOutput(type="function_call_output", call_id=call.call_id, output=output))
    state.added.extend(outputs)
    reason = stop_reason_of(response) or (None if call_tool is not None else "tool_calls")
    if allowed is not None and len(calls) > allowed:
        reason = "max_tool_calls"
    step = StepRecord(
        index=len(state.steps), action=list(response.output), tool_outputs=outputs, duration_s=time.perf_counter() - t0
    )
    step.tool_errors = refused
    state.steps.append(step)
    if reason:
        state.stop_reason = reason
    return reason


async def run_loop(
    state: LoopState, call_model: ModelCall, call_tool: ToolCall | None, max_steps: int | None = DEFAULT_MAX_STEPS
) -> LoopState:
    """Model turns until a stop rule fires or after ``max_steps`` calls (None: no limit); a model server
    refusing a later turn 413 ends the episode graded, truncated (``conversation_too_large``)."""
    while True:
        if max_steps is not None and len(state.steps) >= max_steps:
            state.stop_reason = "max_steps"
            return state
        asked = state.last
        try:
            reason = await model_turn(state, call_model, call_tool)
        except ServerError as exc:
            if exc.status != 413 or not state.steps or state.last is not asked:  # not the model's refusal
                raise
            state.stop_reason = "conversation_too_large"
            return state
        if reason is not None:
            return state


def with_user_message(params: ResponseCreateParams, observation: str | None) -> ResponseCreateParams:
    """``params`` with ``observation`` appended to its input as a user message (unchanged when empty)."""
    if not observation:
        return params
    return params.model_copy(update={"input": [*params.input_items(), Message(role="user", content=observation)]})


async def gymnasium_turn(
    state: LoopState, call_model: ModelCall, post_step: Callable[[NeMoGymResponse], Awaitable[Any]]
) -> StepRecord:
    """One Gymnasium step: the model's response, ``post_step(response)`` (the ``/step`` reply), recorded."""
    t0 = time.perf_counter()
    response = await ask_model(state, call_model)
    answer = GymnasiumStepResponse.model_validate(await post_step(response))
    return gymnasium_transition(state, response, answer, time.perf_counter() - t0)


def gymnasium_transition(
    state: LoopState, response: NeMoGymResponse, answer: GymnasiumStepResponse, duration_s: float
) -> StepRecord:
    """Record the ``/step`` reply ``answer`` in ``state``: the step, and if it goes on, its tool outputs and observation."""
    raw = answer.info.get("tool_outputs") or []
    try:
        outputs = [FunctionCallOutput.model_validate({**o, "type": "function_call_output"}) for o in raw]
    except (ValidationError, TypeError) as exc:
        raise ServerError(
            "resources server",
            "POST /step",
            200,
            f"info.tool_outputs must be a list of {{call_id, output}} "
            f"objects (use tool_output(call, result)), got {raw!r:.300}",
        ) from exc
    record = StepRecord(
        index=len(state.steps),
        action=list(response.output),
        reward=answer.reward,
        terminated=answer.terminated,
        truncated=answer.truncated,
        observation=answer.observation,
        info=answer.info,
        tool_outputs=outputs,
        duration_s=duration_s,
    )
    state.steps.append(record)
    state.transition = answer
    if answer.terminated or answer.truncated:
        state.stop_reason = "terminated" if answer.terminated else "truncated"
    else:
        state.added.extend(outputs)
        if answer.observation:
            state.added.append(Message(role="user", content=answer.observation))
    return record


@dataclass(eq=False, slots=True)
class EpisodeSession:
    """The environment session one episode holds, released once: from the request that may open it (a lost
    reply may have taken effect) until ``ended()`` or ``release()``; ``take()`` is true once (thread-safe)."""

    client: Client
    url: str
    release_path: str
    _: KW_ONLY
    server: str = ""
    cookies: Cookies = field(default_factory=Cookies)
    release_body: dict | Callable[[], dict] | None = None
    open: bool = False  # whether the episode holds the session (or may: its seed went out)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        self.server = self.server or self.url

    def ended(self) -> None:
        """The server released the session itself (a verify, a terminal step): nothing to release."""
        self.open = False

    def take(self) -> bool:
        """True exactly once per opened session: the caller then releases it."""
        with self._lock:
            was_open, self.open = self.open, False
            return was_open

    def names_a_session(self) -> bool:
        """Whether a release could name the session (a body, or a cookie); else the server's idle reaper frees it."""
        return bool(self.release_body) or self.cookies.header(self.url) is not None

    async def release(self, timeout: float | None = None) -> Any:
        """Release the session if this call takes it (``send_release``); None otherwise."""
        return await self.send_release(timeout) if self.take() else None

    async def send_release(self, timeout: float | None = None) -> Any:
        """POST the release route: its answer, None on a 404 (no such route), else ``ServerError``."""
        body = self.release_body() if callable(self.release_body) else (self.release_body or {})
        try:
            return await self.client.post_ok(
                self.url, self.release_path, body, self.cookies, server=self.server, timeout=timeout
            )
        except ServerError as exc:
            if exc.status == 404:
                self.missing_route()
                return None
            raise

    def missing_route(self) -> None:
        """The server has no release route (a reference server without ``/close_session``)."""
