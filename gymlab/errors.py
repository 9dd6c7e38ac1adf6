"""Every error gymlab raises on purpose, under ``GymlabError``, and ``error_body``, every JSON error body a
server answers (the tree: docs/errors.md)."""

from __future__ import annotations

import errno
from typing import Any

from gymlab.protocol.failure_kinds import Failure


class GymlabError(Exception):
    """Base of every error gymlab raises on purpose; pickles whole, so it crosses from a Ray cell or a worker."""

    def __reduce__(self):
        return _rebuilt, (type(self), self.args), self.__dict__ or None


def _rebuilt(cls: type[GymlabError], args: tuple) -> GymlabError:
    """An unpickled error, made without its ``__init__``; pickle then restores its fields."""
    error = cls.__new__(cls, *args)
    error.args = args
    return error


class ServerError(GymlabError):
    """Raised when a server answers a request with an error status."""

    def __init__(
        self,
        server: str,
        route: str,
        status: int,
        cause: str,
        hint: str = "",
        failure: Failure | None = None,
        trace: str | None = None,
    ):
        self.server, self.route, self.status, self.cause, self.hint = server, route, status, cause, hint
        self.failure, self.trace = failure, trace
        what = f"with HTTP {status}" if status else "with no answer"
        msg = f"{server}: {route} failed {what}: {cause}"
        super().__init__(msg + (f" ({hint})" if hint else ""))


class EpisodeFailed(ServerError):
    """Raised by an agent that cannot finish an episode; answered 502 with ``failure`` in the body."""

    def __init__(self, server: str, route: str, failure: Failure, hint: str = ""):
        super().__init__(server, route, 502, failure.message, hint, failure)


class TransportError(ServerError):
    """Raised when a request got no answer (status 0); ``failure`` carries the transport kind."""

    kind = "transport_unreachable"

    def __init__(self, server: str, route: str, cause: str, hint: str = "", failure: Failure | None = None):
        failure = failure or Failure(kind=self.kind, server=server, message=cause)
        super().__init__(server, route, 0, cause, hint, failure)


class TransportUnreachable(TransportError):
    """Raised when the server could not be reached (refused, unknown host, connect timeout): nothing was sent."""


class TransportPeerDrop(TransportError):
    """Raised when the connection broke after the request went out (the server may have acted: never resent)."""

    kind = "transport_peer_drop"


class TransportTimeout(TransportError):
    """Raised when no whole answer came within the request's time budget."""

    kind = "transport_timeout"


class TransportAnswerTooLarge(TransportError):
    """Raised when an answer passed the hop's size cap: cut there, never held whole, never sent again."""

    kind = "response_too_large"


class ServerStartError(GymlabError):
    """Raised when a server cannot start; ``__cause__`` holds the real exception."""


class ConfigError(GymlabError):
    """Raised for a config mistake; the message names the file and the key."""


class DatasetError(GymlabError):
    """Raised for a bad dataset or rollouts file; the message names the file and line."""

    def __init__(self, path: str, line: int | None, cause: str):
        self.path, self.line, self.cause = path, line, cause
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {cause}")


class PersistenceError(GymlabError):
    """Raised when records cannot be written (disk full, read-only, no permission); nothing is half-written."""

    failure_kind = "persistence_failed"

    def __init__(self, path: str, cause: OSError):
        self.path, self.cause = path, cause
        full = cause.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
        todo = "free space on that disk" if full else "make the folder writable"
        super().__init__(
            f"cannot write {path}: {cause.strerror or cause} (nothing was half-written; {todo}, or write to "
            "another place, then run the same command again)"
        )


class ReplicaGone(GymlabError):
    """Raised by a collection replica that is itself gone (not its rollout's failure): the rollout moves on;
    ``failure`` is recorded if no other replica is left."""

    def __init__(self, replica: str, cause: str, failure: Failure | None = None):
        self.replica, self.cause = replica, cause
        self.failure = failure or Failure(kind="transport_peer_drop", server=replica, message=cause)
        super().__init__(f"{replica}: replica gone: {cause} (its rollouts move to the other replicas)")


class ResourcesSessionError(GymlabError):
    """Raised by a resources server to refuse an episode seed or close; answered with ``status_code``."""

    status_code = 400


class ResourcesSeedRejectedError(ResourcesSessionError):
    """Raised by ``seed_session`` for invalid input that no retry can fix (HTTP 422)."""

    status_code = 422


class ResourcesSessionConflictError(ResourcesSessionError):
    """Raised when a session ID is bound to another episode or was closed (HTTP 409)."""

    status_code = 409


class SessionContractError(GymlabError, AssertionError):
    """Raised by ``check_resources_session_contract``; ``rule`` names the rule the server broke."""

    def __init__(self, rule: str, detail: str):
        self.rule, self.detail = rule, detail
        super().__init__(f"resources session contract, rule '{rule}': {detail}")


def error_body(
    server: str,
    route: str,
    message: str,
    *,
    error: str | None = None,
    hint: str | None = None,
    failure: Failure | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """Every JSON error body a gymlab server answers: ``detail`` names server, route and cause, ``message`` the
    cause alone, ``failure`` a failed episode's typed ``Failure``."""
    body: dict[str, Any] = dict(detail=f"{server}: {route}: {message}", server=server, route=route, message=message)
    optional = {"error": error, "hint": hint, "failure": None if failure is None else failure.model_dump(mode="json")}
    return {**body, **{k: v for k, v in optional.items() if v}, **extra}


class ResourcesReleaseFailedError(ResourcesSessionError):
    """Raised when a session's release hook raised: the session stays open, a retried close runs it again."""

    status_code = 500
    failure_kind = "session_release_failed"


class UpstreamError(ServerError):
    """Raised when the upstream endpoint answered with an error (or not at all) after the retries."""

    def __init__(
        self,
        url: str,
        upstream_status: int,
        cause: str,
        hint: str = "",
        attempts: int = 1,
        status: int = 502,
        failure_kind: str | None = None,
    ):
        super().__init__(url, "POST", upstream_status, cause, hint)
        self.url, self.upstream_status, self.attempts, self.answer_status = url, upstream_status, attempts, status
        self.failure_kind = failure_kind  # the typed failure the answer carries, when there is one


class ExportError(GymlabError):
    """Raised when a record cannot be written in the requested format (the message names the episode)."""


class ConversionError(GymlabError, ValueError):
    """Raised when a request or answer has no faithful form in the other API."""


class EpisodeError(GymlabError):
    """Raised when an episode is used out of order (acting before seeding, after closing, ...)."""


class ForkDivergedError(GymlabError):
    """Raised when replaying an episode into a new session gives a different result at some step."""

    def __init__(self, env: str, step: int, what: str, expected: Any, got: Any):
        self.env, self.step, self.what, self.expected, self.got = env, step, what, expected, got
        super().__init__(
            f"{env}: fork diverged at step {step}: {what} was {_short(expected)} originally but "
            f"{_short(got)} on replay; fork needs an environment that is deterministic given the row"
        )


def _short(value: Any, n: int = 120) -> str:
    text = repr(value)
    return text if len(text) <= n else text[: n - 3] + "..."


class WorkBudgetExceeded(GymlabError, TimeoutError):
    """Raised when work sent off the event loop (``offload``) ran past its time budget; its worker was stopped."""

    def __init__(self, message: str, budget_s: float, stage: str = "work"):
        super().__init__(message)
        self.budget_s, self.stage = budget_s, stage  # stage: "work", or "prepare" (a WorkerPool's prepare step)


class WorkerDied(GymlabError):
    """Raised when a worker process died in the middle of a call (killed from outside, out of memory)."""


class AnswerError(GymlabError):
    """Raised by grading code when the model's own answer makes grading fail: graded 0 with the reason in
    ``answer_error``, never masked; anything else grading raises is a masked failure (docs/servers.md)."""
