"""Failure kinds (NeMo Gym 0.7.0's vocabulary) and ``Failure``, their typed form (docs/protocol.md)."""

from __future__ import annotations

import re
import warnings
from types import MappingProxyType
from typing import Any, Literal

from pydantic import BaseModel

#: Every registered plain name, with what it means: the reference's, and gymlab's ``response_too_large``.
FAILURE_KINDS = MappingProxyType(
    {
        "transport_unreachable": "A server could not be reached (connection refused, unknown host).",
        "transport_peer_drop": "A server dropped the connection mid-request (reset, disconnected).",
        "transport_timeout": "A request got no answer within its time budget.",
        "transport_local_resource": "This machine ran out of a local resource (file descriptors, ports, memory).",
        "response_too_large": "A server's answer passed the size cap of one hop (GYMLAB_MAX_ANSWER_MIB) and was cut.",
        "agent_run_error": "The agent's own code failed while running the episode.",
        "agent_request_failed": "A request the agent made to the environment failed (an error status).",
        "agent_timeout": "The whole episode ran out of its time budget.",
        "agent_command_not_allowed": "The agent was asked to do something it may not (a forbidden route).",
        "judge_failed": "A grader the environment relies on (an LLM judge) failed.",
        "judge_unparseable": "A grader's answer could not be read as a grade.",
        "verifier_error": "The environment's own grading code failed.",
        "provider_unavailable": "The model server failed or answered something that is not a response.",
        "provider_quota_exhausted": "The model provider refused for rate or quota (HTTP 429).",
        "provider_oom_killed": "The model server ran out of memory.",
        "session_lost": "The server no longer holds the episode's state (restart, dead worker, eviction).",
        "session_expired": "The episode's session outlived its time to live and was reaped.",
        "session_release_failed": "Releasing the episode's session failed.",
        "cancelled": "The episode was stopped from outside (an interrupt, a cancel).",
        "kill_shaped": "A process died the way a kill looks (SIGKILL, OOM killer).",
        "shutdown": "The server was shutting down.",
        "persistence_failed": "The record could not be written (disk full, read-only).",
        "cohort_incomplete": "A group the record belongs to did not finish.",
    }
)

#: Where in an episode a failure can happen.
Stage = Literal["admission", "seed", "agent", "verification", "cleanup"]

_SERVER_KIND = re.compile(r"^[a-z][a-z0-9_]*:[a-z][a-z0-9_]*$")
_warned: set[str] = set()


def is_server_kind(name: str) -> bool:
    """True for a server-specific ``<server>:<kind>`` name."""
    return isinstance(name, str) and bool(_SERVER_KIND.match(name))


def validate_failure_kind(name: str | None) -> str | None:
    """``name`` itself; an unregistered plain name is warned about once (never refused)."""
    if name is None or name in FAILURE_KINDS or is_server_kind(name):
        return name
    if not isinstance(name, str):
        raise TypeError(f"failure_kind must be a string, got {type(name).__name__}")
    if name not in _warned:
        _warned.add(name)
        snake = re.sub(r"[^a-z0-9_]", "_", name.lower()).strip("_") or "kind"
        warnings.warn(
            f"unregistered failure_kind {name!r}: use one of {', '.join(FAILURE_KINDS)}, or a "
            f"server-specific '<server>:<kind>' such as 'my_env:{snake}'",
            UserWarning,
            stacklevel=2,
        )
    return name


class Failure(BaseModel):
    """Why an episode failed, as data: what an error body's ``failure`` field carries."""

    kind: str
    stage: Stage | None = None
    server: str | None = None
    status: int | None = None
    message: str = ""
    trace: str | None = None  # the failing server's traceback, when it shares it (Lab servers do)
    #: The steps the episode took before it failed (an agent's 502 carries them), so its masked record keeps them.
    steps: list[dict[str, Any]] | None = None
