"""The registry of failure kinds: why an episode could not be finished by the environment itself.

A rollout whose ``mask_sample`` is true carries a ``failure_kind`` so infrastructure failures can be
told apart from a real zero reward. A kind is either a registered plain name below, or a
server-specific ``<server>:<kind>`` (for example ``blackjack:deck_exhausted``), which needs no
registration. Anything else is refused, so a typo cannot start a new, silently separate category.
"""

from __future__ import annotations

import re
from types import MappingProxyType

#: Every registered plain name, with what it means.
FAILURE_KINDS = MappingProxyType(
    {
        "session_lost": "The server no longer holds the episode's state (restart, eviction, expired session).",
        "model_error": "The model server failed or returned something unusable (HTTP error, malformed response).",
        "environment_error": "The environment's own code failed while resetting or stepping the episode.",
        "judge_unavailable": "A grader the environment relies on (an LLM judge, an external checker) could not be reached.",
        "user_simulator_unavailable": "The simulated user that produces observations could not be reached.",
        "sandbox_error": "The sandbox that runs the episode's actions (container, browser, interpreter) failed.",
        "tool_unavailable": "An external tool or API the environment calls could not be reached.",
        "timeout": "The episode, or one call inside it, ran out of its time budget.",
        "cancelled": "The episode was stopped from outside before it could finish (shutdown, user interrupt).",
    }
)

_SERVER_KIND = re.compile(r"^[A-Za-z0-9_.\-]+:[A-Za-z0-9_.\-]+$")


def is_server_kind(name: str) -> bool:
    """True for a server-specific ``<server>:<kind>`` name."""
    return bool(_SERVER_KIND.match(name))


def validate_failure_kind(name: str | None) -> str | None:
    """``name`` itself when it is registered or ``<server>:<kind>`` (None passes); otherwise ``ValueError``."""
    if name is None or name in FAILURE_KINDS or (isinstance(name, str) and is_server_kind(name)):
        return name
    raise ValueError(
        f"unknown failure_kind {name!r}: expected one of {', '.join(sorted(FAILURE_KINDS))}, "
        f"or a server-specific '<server>:<kind>' such as 'my_env:{name if isinstance(name, str) else 'kind'}'"
    )


def describe(name: str) -> str:
    """What a failure kind means (server-specific kinds are described by their server)."""
    validate_failure_kind(name)
    return FAILURE_KINDS.get(name) or f"specific to the server {name.split(':', 1)[0]!r}"


__all__ = ["FAILURE_KINDS", "describe", "is_server_kind", "validate_failure_kind"]
