"""PolicyModel: a model server whose answers come from a Python callable, sync or async (docs/models.md)."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fastapi import FastAPI
from pydantic import Field, PrivateAttr

from gymlab._runtime.app import on_stop
from gymlab.models.streaming import serve_responses
from gymlab.protocol import Message, NeMoGymResponse, ResponseCreateParams, Usage, assistant_message
from gymlab.server import BaseServer

Policy = Callable[[ResponseCreateParams], Any]

#: A sync policy is called on the loop once ``FAST_SHARE`` of its last 16 pooled calls each took under
#: ``FAST_CALL_S`` (wall time); an inline call over ``SLOW_CALL_S`` sends it back to the pool.
FAST_CALL_S = 0.001
FAST_SHARE = 0.75
SLOW_CALL_S = 0.005


def _words(items: list[Any]) -> int:
    n = 0
    for item in items:
        if isinstance(item, Message):
            n += len(item.text.split())
        else:
            for key in ("arguments", "output", "name"):
                value = getattr(item, key, None)
                if isinstance(value, str):
                    n += len(value.split())
    return n


def to_response(answer: Any) -> NeMoGymResponse:
    """A response, its dict, a list of output items or a string (an assistant message) as a response."""
    if isinstance(answer, NeMoGymResponse):
        return answer
    if isinstance(answer, dict):
        return NeMoGymResponse.model_validate(answer)
    if isinstance(answer, str):
        return NeMoGymResponse(output=[assistant_message(answer)])
    if isinstance(answer, (list, tuple)):
        return NeMoGymResponse(output=list(answer))
    raise TypeError(f"a policy must return a response, a list of items or a string, not {type(answer).__name__}")


def as_response(answer: Any, params: ResponseCreateParams, model: str) -> NeMoGymResponse:
    """A policy's answer as a full response, with a word-count usage when it gave none."""
    response = to_response(answer)
    update: dict[str, Any] = {"tools": params.tools}
    if not response.model:
        update["model"] = params.model or model
    if response.usage is None:
        i, o = _words(params.input_items()), _words(response.output)
        update["usage"] = Usage(input_tokens=i, output_tokens=o, total_tokens=i + o)
    if response is answer:  # the policy's own object (it may keep it): a copy
        return response.model_copy(update=update)
    for key, value in update.items():  # built here: completed in place
        setattr(response, key, value)
    return response


class DaemonThreads:
    """At most ``size`` daemon threads for blocking calls: a call that never returns never blocks exit."""

    def __init__(self, size: int, name: str) -> None:
        self.size, self.name = size, name
        self.threads: list[threading.Thread] = []
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.idle = threading.Semaphore(0)

    def run(self, fn: Callable[[], Any]) -> asyncio.Future:
        """``fn()`` on a thread; its result or exception in the returned future (called on the loop only)."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()
        self.jobs.put((loop, future, fn))
        if not self.idle.acquire(blocking=False) and len(self.threads) < self.size:
            self.threads.append(
                threading.Thread(target=self._work, name=f"{self.name}_{len(self.threads)}", daemon=True)
            )
            self.threads[-1].start()
        return future

    def shutdown(self) -> None:
        """End the threads once their current call returns; calls not started are dropped."""
        with contextlib.suppress(queue.Empty):
            while True:
                self.jobs.get_nowait()
        for _ in self.threads:
            self.jobs.put(None)

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for each thread to end (after ``shutdown``); whether all have."""
        for thread in self.threads:
            thread.join(timeout)
        return not any(thread.is_alive() for thread in self.threads)

    def _work(self) -> None:
        while (job := self.jobs.get()) is not None:
            loop, future, fn = job
            if not future.cancelled():
                try:
                    outcome, ok = fn(), True
                except BaseException as exc:  # handed to the caller, as an executor does
                    outcome, ok = exc, False
                with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: no one is waiting
                    loop.call_soon_threadsafe(_settle, future, outcome, ok)
            self.idle.release()


def _settle(future: asyncio.Future, outcome: Any, ok: bool) -> None:
    if not future.done():
        future.set_result(outcome) if ok else future.set_exception(outcome)


@dataclass(slots=True)
class _Calls:
    """How a server calls its policy: awaited (``is_async``), else on the loop (``inline``) or in ``pool``."""

    is_async: bool = False
    inline: bool = False
    pool: DaemonThreads | None = None
    recent: deque = field(default_factory=lambda: deque(maxlen=16))


class PolicyModel(BaseServer):
    """POST /v1/responses answered by ``policy(request)``."""

    policy: Policy
    model_name: str = "policy"
    policy_threads: int = Field(64, ge=1, description="Most calls of a sync policy running at once.")

    _calls: _Calls = PrivateAttr(default_factory=_Calls)

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        policy = self.policy
        self._calls.is_async = inspect.iscoroutinefunction(policy) or inspect.iscoroutinefunction(type(policy).__call__)
        serve_responses(app, self.respond, self.name)
        return app

    def lifespan_parts(self) -> list[contextlib.AbstractAsyncContextManager]:
        return [*super().lifespan_parts(), on_stop(self._close)]

    async def _close(self) -> None:
        calls = self._calls
        if calls.pool is not None:
            calls.pool.shutdown()
            calls.pool = None

    async def respond(self, body: ResponseCreateParams) -> NeMoGymResponse:
        calls, policy = self._calls, self.policy  # one private read a request: pydantic's are slow
        if calls.is_async:
            answer = await policy(body)
        else:
            answer = await self._call_sync(calls, policy, body)
            if inspect.isawaitable(answer):
                answer = await answer
        return as_response(answer, body, self.model_name)

    async def _call_sync(self, calls: _Calls, policy: Policy, body: ResponseCreateParams) -> Any:
        if calls.inline:
            t0 = time.perf_counter()
            try:
                return policy(body)
            finally:
                if time.perf_counter() - t0 > SLOW_CALL_S:  # it held the loop: back to the pool
                    calls.inline = False
                    calls.recent.clear()
        if calls.pool is None:
            calls.pool = DaemonThreads(self.policy_threads, f"gymlab-{self.name}")

        def timed() -> tuple[Any, float]:
            t0 = time.perf_counter()
            return policy(body), time.perf_counter() - t0

        answer, took = await calls.pool.run(timed)
        recent = calls.recent
        recent.append(took < FAST_CALL_S)
        if len(recent) == recent.maxlen and sum(recent) >= FAST_SHARE * len(recent):
            calls.inline = True
        return answer
