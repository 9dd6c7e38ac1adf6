"""PolicyModel: a model server whose answers come from a Python callable.

The callable receives the request (``ResponseCreateParams``) and returns a response, a list of
output items, or a plain string (one assistant message); it may be sync or async. Rule-based
policies let every example run with no external model.

A sync policy that is slow (a local model, a blocking client) runs in a thread pool, so it still
answers as many requests at once as the run sends: the pool grows to the run's concurrency, up to
``policy_threads``. A sync policy that proves fast (a rule-based one: most of its recent calls take
under ``FAST_CALL_S``) is called on the loop instead, where a thread hand-off would cost more than
the call (measured: 2 ms of CPU per calculator episode); one slow call sends it back to the pool.
An async policy runs on the server's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import FastAPI
from pydantic import Field, PrivateAttr

from gymlab.models.streaming import StreamableParams, streamed, unstreamed
from gymlab.protocol import (
    Message,
    NeMoGymResponse,
    ResponseCreateParams,
    Usage,
    assistant_message,
)
from gymlab.server import BaseServer

Policy = Callable[[ResponseCreateParams], Any]

#: A sync policy is called on the loop once ``FAST_SHARE`` of its last 16 pooled calls each took under
#: ``FAST_CALL_S`` (wall time, so a policy that sleeps or waits on I/O never qualifies); an inline
#: call over ``SLOW_CALL_S`` sends it back to the pool.
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


def as_response(answer: Any, params: ResponseCreateParams, model: str) -> NeMoGymResponse:
    """A policy's answer as a full response, with a word-count usage when it gave none."""
    if isinstance(answer, NeMoGymResponse):
        response = answer
    elif isinstance(answer, dict):
        response = NeMoGymResponse.model_validate(answer)
    else:
        if isinstance(answer, str):
            output = [assistant_message(answer)]
        elif isinstance(answer, (list, tuple)):
            output = list(answer)
        else:
            raise TypeError(
                f"a policy must return a response, a list of items or a string, not {type(answer).__name__}"
            )
        response = NeMoGymResponse(output=output)
    update: dict[str, Any] = {}
    if not response.model:
        update["model"] = params.model or model
    if response.usage is None:
        i, o = _words(params.input_items()), _words(response.output)
        update["usage"] = Usage(input_tokens=i, output_tokens=o, total_tokens=i + o)
    update.setdefault("tools", params.tools)
    return response.model_copy(update=update) if update else response


class _Calls:
    """How a server calls its policy: on the loop (``inline``) or in ``pool``, judged from the
    ``recent`` pooled calls; whether the policy is async, asked once per policy."""

    __slots__ = ("inline", "pool", "recent", "_async_of")

    def __init__(self) -> None:
        self.inline = False
        self.pool: ThreadPoolExecutor | None = None
        self.recent: deque = deque(maxlen=16)
        self._async_of: tuple[Any, bool] | None = None

    def is_async(self, policy: Policy) -> bool:
        known = self._async_of
        if known is None or known[0] is not policy:
            is_async = inspect.iscoroutinefunction(policy) or inspect.iscoroutinefunction(type(policy).__call__)
            known = self._async_of = (policy, is_async)
        return known[1]


class PolicyModel(BaseServer):
    """POST /v1/responses answered by ``policy(request)``."""

    policy: Policy
    model_name: str = "policy"
    policy_threads: int = Field(64, ge=1, description="Most calls of a sync policy running at once.")

    _calls: _Calls = PrivateAttr(default_factory=_Calls)

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/v1/responses", response_model_exclude_none=True)(self.responses)
        inner = app.router.lifespan_context

        @contextlib.asynccontextmanager
        async def lifespan(a):
            try:
                async with inner(a) as state:
                    yield state
            finally:
                calls = self._calls
                if calls.pool is not None:
                    calls.pool.shutdown(wait=False, cancel_futures=True)
                    calls.pool = None

        app.router.lifespan_context = lifespan
        return app

    async def responses(self, body: StreamableParams) -> NeMoGymResponse:
        """The policy's response to ``body`` (``stream: true``: as Responses events)."""
        if body.stream:
            return streamed(await self.respond(unstreamed(body)))
        return await self.respond(body)

    async def respond(self, body: ResponseCreateParams) -> NeMoGymResponse:
        calls, policy = self._calls, self.policy  # one private read a request: pydantic's are slow
        if calls.is_async(policy):
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
            calls.pool = ThreadPoolExecutor(self.policy_threads, thread_name_prefix=f"gymlab-{self.name}")

        def timed() -> tuple[Any, float]:
            t0 = time.perf_counter()
            return policy(body), time.perf_counter() - t0

        answer, took = await asyncio.get_running_loop().run_in_executor(calls.pool, timed)
        recent = calls.recent
        recent.append(took < FAST_CALL_S)
        if len(recent) == recent.maxlen and sum(recent) >= FAST_SHARE * len(recent):
            calls.inline = True
        return answer
