"""Which ``Failure`` an error of a hop is, decided from data, never its text (docs/errors.md)."""

from __future__ import annotations

import asyncio
from typing import Literal

from gymlab.errors import ServerError, TransportUnreachable
from gymlab.protocol.failure_kinds import Failure, Stage

#: Who answered the failed request: the model server, the resources (environment) server, an agent.
Role = Literal["model", "resources", "agent"]


def failure_of(exc: BaseException, *, role: Role, stage: Stage | None) -> Failure:
    """The ``Failure`` that ``exc`` (raised by a request to a ``role`` server at ``stage``) stands for."""
    if isinstance(exc, ServerError):
        if (found := exc.failure) is not None:
            update = {
                "stage": found.stage or stage,
                "server": found.server or exc.server,
                "message": found.message or exc.cause,
                "trace": found.trace or exc.trace,
            }
            return found.model_copy(update=update)
        return Failure(
            kind=_kind(role, stage, exc.status),
            stage=stage,
            server=exc.server,
            status=exc.status or None,
            message=str(exc),
            trace=exc.trace,
        )
    if isinstance(exc, asyncio.TimeoutError):
        return Failure(kind="agent_timeout", stage=stage, message=f"no result within the time budget ({exc})")
    if isinstance(exc, asyncio.CancelledError):
        return Failure(kind="cancelled", stage=stage, message="cancelled")
    return Failure(kind="agent_run_error", stage=stage, message=f"{type(exc).__name__}: {exc}")


def run_failure(exc: BaseException, agent: str) -> Failure:
    """The failure of an episode whose ``POST /run`` to ``agent`` raised ``exc`` (default ``agent_run_error``)."""
    failure = failure_of(exc, role="agent", stage="admission" if isinstance(exc, TransportUnreachable) else None)
    return failure if failure.server else failure.model_copy(update={"server": agent})


def _kind(role: Role, stage: Stage | None, status: int) -> str:
    if status == 410:
        return "session_lost"
    if role == "model":
        return "provider_quota_exhausted" if status == 429 else "provider_unavailable"
    if role == "resources":
        if stage == "cleanup" and (status >= 500 or status in (408, 425, 429)):  # a later release may pass
            return "session_release_failed"
        return "verifier_error" if stage == "verification" else "agent_request_failed"
    return "agent_run_error"
