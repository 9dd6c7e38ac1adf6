"""Rubric components as frame columns: ``reward_<name>`` in the episodes and steps frames.

Called by ``gymlab.lab.frames`` after it builds a frame; records without components add nothing
(checked once per episode, so a million-step frame without rubrics pays one pass over the episodes).
A failed judge's component is a missing value (NaN), never a 0.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: Prefix of a component's column.
PREFIX = "reward_"


def component_names(records: Sequence[Any]) -> list[str]:
    """Every component name in ``records``, in first-seen order."""
    names: dict[str, None] = {}
    for r in records:
        for name in r.reward_components or ():
            names.setdefault(name, None)
    return list(names)


def add_component_columns(frame: Any, records: Sequence[Any], level: str = "episodes") -> Any:
    """``frame`` with a ``reward_<name>`` column per component (``level``: ``episodes`` or ``steps``)."""
    names = component_names(records)
    if not names:
        return frame
    import numpy as np

    if level == "episodes":
        rows = [r.reward_components or {} for r in records]
    elif level == "steps":
        rows = [s.reward_components or {} for r in records for s in r.steps]
    else:
        raise ValueError(f"level must be 'episodes' or 'steps', got {level!r}")
    if len(rows) != len(frame):
        raise ValueError(f"{len(rows)} {level} in the records but {len(frame)} rows in the frame")
    for name in names:
        values = [row.get(name) for row in rows]
        frame[PREFIX + name] = np.array([np.nan if v is None else v for v in values], dtype="float64")
    return frame


__all__ = ["PREFIX", "add_component_columns", "component_names"]
