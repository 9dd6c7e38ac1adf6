"""Rubric components as ``reward_<name>`` frame columns; a failed judge's component is NaN, never a 0."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

PREFIX = "reward_"


def add_component_columns(frame: Any, components: Sequence[dict | None]) -> Any:
    """``frame`` with a ``reward_<name>`` column per component; ``components[i]`` is row ``i``'s or None."""
    if not any(components):
        return frame
    import numpy as np

    if len(components) != len(frame):
        raise ValueError(f"{len(components)} rows of components but {len(frame)} rows in the frame")
    for name in dict.fromkeys(name for row in components for name in row or ()):
        values = [(row or {}).get(name) for row in components]
        frame[PREFIX + name] = np.array([np.nan if v is None else v for v in values], dtype="float64")
    return frame
