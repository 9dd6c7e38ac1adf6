"""``ResourcesSessionFences``: a closed session is fenced against a late seed for ``window_seconds``; past
``max_fences`` the oldest is dropped, logged (docs/runtime.md)."""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable

log = logging.getLogger("gymlab.server")

DEFAULT_WINDOW_SECONDS = 300.0


class ResourcesSessionFences:
    """The set of recently closed session IDs, each until ``window_seconds`` after its close."""

    def __init__(
        self,
        window_seconds: float = DEFAULT_WINDOW_SECONDS,
        max_fences: int = 100_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if window_seconds < 0 or max_fences < 1:
            raise ValueError(f"expected window_seconds >= 0 and max_fences >= 1, got {window_seconds} and {max_fences}")
        self.window_seconds, self.max_fences, self._clock = float(window_seconds), max_fences, clock
        self._expiry: OrderedDict[str, float] = OrderedDict()  # in expiry order: the window is constant
        self.evicted_early = 0

    def fence(self, session_id: str) -> None:
        """Fence ``session_id`` from now until the window ends (a repeated close restarts it)."""
        now = self._clock()
        self._purge(now)
        self._expiry.pop(session_id, None)
        self._expiry[session_id] = now + self.window_seconds
        while len(self._expiry) > self.max_fences:
            dropped, _ = self._expiry.popitem(last=False)
            self.evicted_early += 1
            log.warning("session fences full (%d): dropped the fence of %r early", self.max_fences, dropped)

    def remaining(self, session_id: str) -> float | None:
        """Seconds until ``session_id``'s fence expires, or None when it is not fenced."""
        expiry = self._expiry.get(session_id)
        if expiry is None:
            return None
        left = expiry - self._clock()
        if left <= 0:
            del self._expiry[session_id]
            return None
        return left

    def __contains__(self, session_id: object) -> bool:
        return isinstance(session_id, str) and self.remaining(session_id) is not None

    def __len__(self) -> int:
        self._purge(self._clock())
        return len(self._expiry)

    def _purge(self, now: float) -> None:
        while self._expiry and next(iter(self._expiry.values())) <= now:  # oldest first
            self._expiry.popitem(last=False)
