"""One retry rule: a failure is retried by its kind, never its text or status (docs/transport.md), in
``retrying``, the one retry loop, each caller passing which failure is tried again and when."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

T = TypeVar("T")

#: Prefixes of the failure kinds worth retrying (``gymlab.protocol.failure_kinds``).
RETRIED_PREFIXES = ("transport_", "provider_")

#: Kinds a session's release may fail with that a later release may not (it is idempotent on the server).
RELEASE_RETRIED = frozenset({"session_release_failed", "shutdown"})

#: Seconds an episode's failures that may pass are retried for, from its first failed try, whatever
#: the retry count: a server restarting or a network outage of a few seconds is ridden out.
RETRY_SPAN_S = 20.0


def retried(kind: str | None, *, release: bool = False) -> bool:
    """Whether an episode (``release``: a session's release) that failed with ``kind`` may pass if tried again."""
    return kind is not None and (kind.startswith(RETRIED_PREFIXES) or (release and kind in RELEASE_RETRIED))


def backoff_delay(base_s: float, attempt: int, cap_s: float = 60.0) -> float:
    """Seconds to wait before retry ``attempt`` (1-based): ``base_s`` doubling, capped, jittered
    to 50-100 % so many clients that failed together do not retry together."""
    return min(cap_s, base_s * 2.0 ** (attempt - 1)) * random.uniform(0.5, 1.0)


def episode_retry(
    kind: str | None, retries: int, max_retries: int, base_s: float, since: float, span_s: float = RETRY_SPAN_S
) -> float | None:
    """Seconds to wait before retrying an episode that failed with ``kind`` after ``retries`` retries,
    or None: no more. A kind that may pass gets ``max_retries`` retries (none when 0), and more,
    backing off, until its failures have lasted ``span_s`` (``since``: the first, ``time.monotonic``)."""
    if not retried(kind) or max_retries < 1 or (retries >= max_retries and time.monotonic() - since >= span_s):
        return None
    return backoff_delay(base_s, retries + 1)


async def retrying(call: Callable[[], Awaitable[T]], again: Callable[[Exception, int], float | None]) -> T:
    """``await call()`` until it returns. After try ``n`` (1-based) raised ``exc``, ``again(exc, n)``
    gives the seconds to wait before the next try, or None: ``exc`` is raised. A cancel is never retried."""
    tries = 0
    while True:
        tries += 1
        try:
            return await call()
        except Exception as exc:
            delay = again(exc, tries)
            if delay is None:
                raise
        if delay > 0:
            await asyncio.sleep(delay)
