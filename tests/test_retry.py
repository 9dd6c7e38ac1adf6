"""The one retry loop: each caller's rule decides what is tried again and when; a cancel is never retried."""

from __future__ import annotations

import asyncio

import pytest

from gymlab.retry import retrying


async def test_a_failure_the_rule_accepts_is_tried_again_until_the_call_returns():
    tries, asked = [], []

    async def call():
        tries.append(1)
        if len(tries) < 3:
            raise ConnectionRefusedError("not yet")
        return "answer"

    def again(exc, n):
        asked.append((type(exc).__name__, n))
        return 0.0

    assert await retrying(call, again) == "answer"
    assert asked == [("ConnectionRefusedError", 1), ("ConnectionRefusedError", 2)]


async def test_a_failure_the_rule_refuses_is_raised_as_it_was():
    tries = []

    async def call():
        tries.append(1)
        raise ValueError(f"try {len(tries)}")

    with pytest.raises(ValueError, match="try 2"):
        await retrying(call, lambda exc, n: 0.0 if n < 2 else None)
    assert len(tries) == 2


async def test_a_cancel_is_never_retried_during_a_try_or_a_wait():
    started, tries = asyncio.Event(), []

    async def hangs():
        tries.append(1)
        started.set()
        await asyncio.Event().wait()

    task = asyncio.ensure_future(retrying(hangs, lambda exc, n: 0.0))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(tries) == 1

    waiting = asyncio.Event()

    async def fails():
        tries.append(1)
        raise OSError("refused")

    def long_wait(exc, n):
        waiting.set()
        return 3600.0

    task = asyncio.ensure_future(retrying(fails, long_wait))
    await waiting.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert len(tries) == 2
