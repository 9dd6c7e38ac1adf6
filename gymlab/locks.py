"""``ResourcesSessionLocks``: each session's seed and close run one at a time (docs/runtime.md)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator


class ResourcesSessionLocks:
    """``async with locks(session_id):`` serialises the seed and close of one session."""

    def __init__(self) -> None:
        self._entries: dict[str, list] = {}  # session id -> [lock, holders and waiters]

    @contextlib.asynccontextmanager
    async def __call__(self, session_id: str) -> AsyncIterator[None]:
        entry = self._entries.get(session_id)
        if entry is None:
            entry = self._entries[session_id] = [asyncio.Lock(), 0]
        entry[1] += 1
        try:
            async with entry[0]:
                yield
        finally:
            entry[1] -= 1
            if entry[1] == 0:
                del self._entries[session_id]

    def __len__(self) -> int:
        """Sessions with a holder or a waiter right now."""
        return len(self._entries)

    def locked(self, session_id: str) -> bool:
        entry = self._entries.get(session_id)
        return entry is not None and entry[0].locked()
