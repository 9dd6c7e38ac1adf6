"""PolicyModel: a model server whose answers come from a Python callable.

The callable receives the request (``ResponseCreateParams``) and returns a response, a list of
output items, or a plain string (one assistant message); it may be sync or async. Rule-based
policies let every example run with no external model.

A sync policy runs in a thread pool, so a slow one (a local model, a blocking client) still answers
as many requests at once as the run sends: the pool grows to the run's concurrency, up to
``policy_threads`` (1: one call at a time, for a policy that is not thread-safe). An async policy
runs on the server's loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import FastAPI
from pydantic import Field, PrivateAttr

from gymlab.protocol import (
    Message,
    NeMoGymResponse,
    ResponseCreateParams,
    Usage,
    assistant_message,
)
from gymlab.server import BaseServer

Policy = Callable[[ResponseCreateParams], Any]


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


class PolicyModel(BaseServer):
    """POST /v1/responses answered by ``policy(request)``."""

    policy: Policy
    model_name: str = "policy"
    policy_threads: int = Field(64, ge=1, description="Most calls of a sync policy running at once.")

    _pool: ThreadPoolExecutor | None = PrivateAttr(default=None)

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
                if self._pool is not None:
                    self._pool.shutdown(wait=False, cancel_futures=True)
                    self._pool = None

        app.router.lifespan_context = lifespan
        return app

    def _is_async(self) -> bool:
        call = self.policy
        return inspect.iscoroutinefunction(call) or inspect.iscoroutinefunction(type(call).__call__)

    async def responses(self, body: ResponseCreateParams) -> NeMoGymResponse:
        if self._is_async():
            answer = await self.policy(body)
        else:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.policy_threads, thread_name_prefix=f"gymlab-{self.name}")
            answer = await asyncio.get_running_loop().run_in_executor(self._pool, self.policy, body)
            if inspect.isawaitable(answer):
                answer = await answer
        return as_response(answer, body, self.model_name)
