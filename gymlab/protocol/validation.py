"""A pydantic validation error in one line: the one rule every error message about a bad value uses."""

from __future__ import annotations

from typing import Any

#: How many errors a message names before it says how many more there are.
SHOWN = 3


def describe_validation(errors: Any, default: str = "value") -> str:
    """``loc: message`` for each error (``parent: unknown key 'name'`` for an extra key), joined by ``; ``."""
    errors = errors.errors() if hasattr(errors, "errors") else list(errors)
    parts = []
    for e in errors[:SHOWN]:
        loc = [str(p) for p in e.get("loc", ())]
        if e.get("type") == "extra_forbidden" and loc:
            parent = ".".join(loc[:-1])
            parts.append(f"{parent + ': ' if parent else ''}unknown key {loc[-1]!r}")
        else:
            parts.append(f"{'.'.join(loc) or default}: {e.get('msg')}")
    if len(errors) > SHOWN:
        parts.append(f"and {len(errors) - SHOWN} more")
    return "; ".join(parts)
