"""One retry rule: exponential backoff with jitter, shared by collection and the model proxy."""

from __future__ import annotations

import random


def backoff_delay(base_s: float, attempt: int, cap_s: float = 60.0) -> float:
    """Seconds to wait before retry ``attempt`` (1-based): ``base_s`` doubling, capped, jittered
    to 50-100 % so many clients that failed together do not retry together."""
    return min(cap_s, base_s * 2 ** (attempt - 1)) * random.uniform(0.5, 1.0)


__all__ = ["backoff_delay"]
