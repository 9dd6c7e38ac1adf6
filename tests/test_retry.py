"""The one retry loop: each caller's rule decides what is tried again and when; a cancel is never retried."""

from __future__ import annotations

import asyncio
import time

import pytest

from gymlab._http.retry import RETRY_SPAN_S, episode_retry, retrying


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


def test_an_episode_failure_that_may_pass_is_retried_until_its_failures_span_the_retry_span():
    """Two retries of 0.5 s doubling spanned 1.5 s: a 2 s outage failed rows. Past ``max_retries``, a
    kind that may pass is retried on while its first failure is under ``RETRY_SPAN_S`` old."""
    now = time.monotonic()
    assert all(episode_retry("transport_unreachable", n, 2, 0.5, since=now) is not None for n in range(6))
    assert 4.0 <= episode_retry("transport_unreachable", 4, 2, 0.5, since=now) <= 8.0  # backing off, doubling
    assert episode_retry("transport_unreachable", 2, 2, 0.5, since=now - RETRY_SPAN_S) is None  # spent
    assert episode_retry("transport_timeout", 1, 2, 0.5, since=now - RETRY_SPAN_S) is not None  # max_retries first
    assert episode_retry("verifier_error", 0, 2, 0.5, since=now) is None  # never retried
    assert episode_retry("transport_unreachable", 0, 0, 0.5, since=now) is None  # retries off
    # the retries before the span is spent, from the first failure: at least as long as the span
    total, n = 0.0, 0
    while (delay := episode_retry("provider_unavailable", n, 2, 0.5, since=now - total)) is not None:
        total, n = total + delay, n + 1
    assert total >= RETRY_SPAN_S and n <= 10


def test_the_retry_span_is_the_callers_to_choose():
    """``span_s`` (``collect(retry_span_s=)``, ``gymlab collect --retry-span``) replaces the default
    span; ``max_retries`` still comes first, and a kind that never passes is still never retried."""
    now = time.monotonic()
    assert episode_retry("transport_unreachable", 2, 2, 0.5, since=now - 3, span_s=5) is not None  # under 5 s
    assert episode_retry("transport_unreachable", 2, 2, 0.5, since=now - 3, span_s=2) is None  # spent
    assert episode_retry("transport_unreachable", 1, 2, 0.5, since=now - 3, span_s=0) is not None  # max_retries
    assert episode_retry("verifier_error", 0, 2, 0.5, since=now, span_s=60) is None


def test_the_collect_command_refuses_a_retry_span_that_is_not_a_number(tmp_path):
    import subprocess
    import sys

    argv = [sys.executable, "-m", "gymlab.cli", "collect", "-o", str(tmp_path / "x.jsonl"), "--retry-span", "soon"]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "--retry-span" in proc.stderr and "soon" in proc.stderr
    assert not (tmp_path / "x.jsonl").exists()
