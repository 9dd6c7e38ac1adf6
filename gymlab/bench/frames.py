"""The frames benchmark: seconds to build the steps frame of a million step rows."""

from __future__ import annotations

import time

from gymlab.lab.frames import steps_frame
from gymlab.protocol.record import synthetic


def frames_benchmark(n_steps: int = 1_000_000, steps_per_episode: int = 20) -> float:
    """Seconds to build the steps frame of ``n_steps`` step rows (records built beforehand, not timed)."""
    import pandas  # noqa: F401  (its one-time import is not part of the figure)

    records = synthetic(max(1, n_steps // steps_per_episode), steps_per_episode)
    t0 = time.perf_counter()
    frame = steps_frame(records)
    elapsed = time.perf_counter() - t0
    assert len(frame) == len(records) * steps_per_episode
    return elapsed
