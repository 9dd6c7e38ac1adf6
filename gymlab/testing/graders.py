"""CPU-bound graders for tests of work off the event loop: top-level functions a worker process imports."""

from __future__ import annotations

import os
import time
from pathlib import Path


def burn_until(release: str, started: str, limit_s: float) -> int:
    """Pure-Python arithmetic (holding the GIL) until ``release`` exists or ``limit_s`` pass; returns the rounds."""
    Path(started, str(os.getpid())).touch()
    deadline, rounds, total = time.monotonic() + limit_s, 0, 0
    while time.monotonic() < deadline and not os.path.exists(release):
        for i in range(2000):
            total += i * i
        rounds += 1
    return rounds


def raise_on(text: str) -> float:
    """A grader that fails on any answer holding "boom" (``ZeroDivisionError``), else pays 1.0."""
    if "boom" in text:
        return 1 / 0
    return 1.0
