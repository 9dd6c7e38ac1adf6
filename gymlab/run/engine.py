"""The run engine: jobs through replicas, each outcome to a sink; retries by failure kind (docs/collection.md)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from gymlab._http.retry import RETRY_SPAN_S, episode_retry, retried, retrying
from gymlab.errors import GymlabError, ReplicaGone, ServerError
from gymlab.failures import run_failure
from gymlab.protocol.failure_kinds import Failure
from gymlab.protocol.record import Rollout
from gymlab.protocol.validation import describe_validation
from gymlab.run.pool import ReplicaPool

#: Tries that stop a run when they all fail alike (``Breaker``); ``Policy.stop_after``.
STOP_AFTER = 10


@dataclass(frozen=True)
class Policy:
    """How one job is attempted (``gymlab._http.retry.episode_retry``, ``Breaker``); None: no bound."""

    max_retries: int = 2
    backoff_s: float = 0.5
    timeout_s: float | None = None
    stop_after: int | None = STOP_AFTER
    retry_span_s: float = RETRY_SPAN_S


@dataclass
class Outcome:
    """One job's end: its ``record`` and raw ``answer`` (None when a replica gave a ``Rollout``), or its ``failure``."""

    record: Rollout | None = None
    answer: dict[str, Any] | None = None
    failure: Failure | None = None
    error: BaseException | None = None
    attempts: int = 1
    duration_s: float = 0.0


@dataclass(frozen=True)
class Job:
    """A materialized row, the replicas that run it, the agent's name for errors and the sink's target."""

    position: int
    row: dict[str, Any]
    pool: ReplicaPool
    name: str
    target: Any = None


def checked(answer: Any, name: str) -> Rollout:
    """The ``/run`` answer as a ``Rollout``; anything else is the agent's failure."""
    if isinstance(answer, Rollout):
        return answer
    if not isinstance(answer, dict):
        raise ServerError(name, "POST /run", 200, f"answer is not a JSON object: {str(answer)[:200]}")
    try:
        return Rollout.model_validate(answer)
    except ValidationError as exc:
        why = describe_validation(exc, "record")
        raise ServerError(name, "POST /run", 200, f"answer is not a rollout record: {why}") from None


class RunStopped(GymlabError):
    """Raised when a run's ``Breaker`` stopped it: its first tries all failed alike."""


class Breaker:
    """Stops a run whose first ``n`` tries all end in the same retried failure, once it has lasted
    ``span_s``. ``pending``: failed jobs still being retried (a stopped run writes them)."""

    def __init__(self, n: int | None, span_s: float = RETRY_SPAN_S):
        self.n, self.t0, self.span_s = n or 0, time.monotonic(), span_s
        self.kind: str | None = None
        self.count = 0
        self.tripped: Failure | None = None
        self.pending: dict[int, tuple[Job, Outcome]] = {}

    def record(self, failure: Failure | None) -> bool:
        """One try's end (``failure`` None: a record); True once the run must stop."""
        if self.tripped or self.n < 1:
            return self.tripped is not None
        if failure is None or not retried(failure.kind) or self.kind not in (None, failure.kind):
            self.n = 0
            return False
        self.kind, self.count = failure.kind, self.count + 1
        if self.count >= self.n and time.monotonic() - self.t0 >= self.span_s:
            self.tripped = failure
        return self.tripped is not None

    def error(self) -> RunStopped:
        f = self.tripped or Failure(kind="cancelled")  # (asked only once tripped)
        return RunStopped(
            f"stopped after the first {self.count} tries all failed with {f.kind} (such as "
            f"{f.server + ': ' if f.server else ''}{f.message}); the rows not started were not attempted: "
            "fix the cause, then rerun to resume (--stop-after 0, stop_after=None: never stop)"
        )


class _Failed(GymlabError):
    """One try's end without a record; ``moved`` when another live replica can take the job."""

    def __init__(self, failure: Failure, error: BaseException, moved: bool = False):
        self.failure, self.error, self.moved = failure, error, moved


async def attempt(job: Job, policy: Policy, breaker: Breaker | None = None) -> Outcome:
    """Run ``job`` until a record, a final failure or ``breaker``; a gone replica's job moves to a live one."""
    pool, name = job.pool, job.name
    t0 = time.perf_counter()
    tries = retries = moves = 0
    breaker = breaker or Breaker(None)
    since = 0.0

    async def once() -> Outcome:
        nonlocal tries
        tries += 1
        replica = pool.pick()
        try:
            answer = await replica.run(job.row, policy.timeout_s)
            record = checked(answer, name)
            breaker.record(None)
            return Outcome(record, answer if isinstance(answer, dict) else None, attempts=tries)
        except ReplicaGone as gone:
            error = gone.__cause__ if isinstance(gone.__cause__, ServerError) else gone
            failure = run_failure(error, name) if error is not gone else gone.failure
            raise _Failed(failure, error, moved=pool.lose(replica)) from None
        except (TimeoutError, ServerError, OSError) as err:
            raise _Failed(run_failure(err, name), err) from None
        finally:
            pool.done(replica)

    def again(exc: Exception, _: int) -> float | None:
        nonlocal retries, moves, since
        if not isinstance(exc, _Failed) or breaker.record(exc.failure):
            return None
        breaker.pending[job.position] = (job, Outcome(failure=exc.failure, error=exc.error, attempts=tries))
        if exc.moved:
            moves += 1
            retries += 1 if moves == 1 or moves > 2 * len(pool) else 0
            if retries <= policy.max_retries + 1:  # the first move is never the reason a job fails
                return 0.0
        since = since or time.monotonic()
        delay = episode_retry(
            exc.failure.kind, retries, policy.max_retries, policy.backoff_s, since, policy.retry_span_s
        )
        retries += delay is not None
        return delay

    try:
        outcome = await retrying(once, again)
    except _Failed as failed:
        outcome = Outcome(failure=failed.failure, error=failed.error, attempts=tries)
    breaker.pending.pop(job.position, None)  # (kept when cancelled: a stopped run writes it)
    outcome.duration_s = time.perf_counter() - t0
    return outcome


class RunState:
    """What a run has done (running, stopped by a cancel, finished): an interrupted run reports from it."""

    def __init__(self, total: int = 0):
        self.total, self.running, self.stopped = total, 0, 0
        self.finished: Sequence[bytes] = []

    def cancelled_line(self) -> str:
        """One line saying what an interrupt stopped and what it kept."""
        not_started = self.total - self.running - self.stopped - len(self.finished)
        return (
            f"gymlab: run cancelled: {self.stopped} running episode(s) stopped and their sessions closed, "
            f"{not_started} not started; the {len(self.finished)} finished are in lab.last_run"
        )


async def run_jobs(
    jobs: Iterable[Job],
    sink: Callable[[Job, Outcome], None],
    *,
    concurrency: int,
    policy: Policy,
    state: RunState | None = None,
) -> None:
    """Every job through ``attempt``, ``concurrency`` at a time, each outcome to ``sink`` as it finishes; on
    an error or a cancel every running episode's cleanup finishes before this returns."""
    counts = state if state is not None else RunState()
    source = iter(jobs)
    breaker = Breaker(min(policy.stop_after or 0, max(1, concurrency)), policy.retry_span_s)

    async def worker() -> None:
        for job in source:
            counts.running += 1
            try:
                outcome = await attempt(job, policy, breaker)
            except asyncio.CancelledError:
                counts.stopped += 1
                raise
            finally:
                counts.running -= 1
            sink(job, outcome)
            if breaker.tripped:
                raise breaker.error()

    workers = [asyncio.ensure_future(worker()) for _ in range(max(1, concurrency))]
    try:
        await asyncio.gather(*workers)
    finally:
        for task in workers:  # on an error or a cancel, no worker may go on after the run ends
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)
        if breaker.tripped:
            for job, outcome in sorted(breaker.pending.values(), key=lambda p: p[0].position):
                sink(job, outcome)
