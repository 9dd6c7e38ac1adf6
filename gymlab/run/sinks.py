"""The run engine's two sinks: ``MemorySink`` (``run_many``), ``JsonlSink`` (``collect``) with ``failure_row``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from gymlab.jsonl import LineWriter
from gymlab.protocol import record as records
from gymlab.protocol.failure_kinds import Failure
from gymlab.protocol.record import Rollout
from gymlab.run.engine import Job, Outcome, RunState

Key = tuple[Any, Any]


def key_of(record: dict[str, Any]) -> Key:
    """The (task, repeat) key that names a row, a record or a failure in every file."""
    return (record.get("_ng_task_index"), record.get("_ng_rollout_index"))


def failure_row(row: dict[str, Any], failure: Failure, *, attempts: int, status: int | None = None) -> dict[str, Any]:
    """A failures-file row: the input row with the failed record's failure fields, server, attempts and status."""
    failed = records.failed(row, failure)
    fields = ("mask_sample", "failure_kind", "failure_reason", "failure_stage")
    return {
        **row,
        **{k: getattr(failed, k) for k in fields},
        "failure_server": failure.server,
        "attempts": attempts,
        "status": status,
    }


class Builder(Protocol):
    """Where a memory sink holds its records (``gymlab.lab.store.StoreBuilder``)."""

    def add(self, position: int, record: Rollout) -> None: ...

    def line(self, index: int) -> bytes: ...


class MemorySink(Sequence[bytes]):
    """Each record (a failure as a masked record) held by position in ``held``; as a sequence, the finished
    records' JSON lines in the order they finished (``state.finished``: what an interrupted run keeps)."""

    def __init__(
        self,
        held: Builder,
        agent: str,
        env: str | None,
        *,
        raise_errors: bool,
        state: RunState,
        bar: Any = None,
        observe: Callable[[Rollout], None] | None = None,
    ):
        self.held, self.agent, self.env, self.raise_errors = held, agent, env or agent, raise_errors
        self.bar, self.observe = bar, observe
        self.order: list[int] = []  # positions in the order their episodes finished
        state.finished = self

    def __call__(self, job: Job, outcome: Outcome) -> None:
        row, record = job.row, outcome.record
        if record is None:
            if self.raise_errors and outcome.error is not None:
                raise outcome.error
            assert outcome.failure is not None  # an outcome is a record or a failure
            record = records.failed(row, outcome.failure, duration_s=outcome.duration_s)
        record = records.with_identity(
            record, task_index=row["_ng_task_index"], repeat=row["_ng_rollout_index"], agent=self.agent, env=self.env
        )
        self.held.add(job.position, record)
        self.order.append(job.position)
        if self.observe is not None:
            self.observe(record)
        if self.bar is not None:
            self.bar.update(1)

    def __len__(self) -> int:
        return len(self.order)

    def __getitem__(self, i: Any) -> Any:
        return self.held.line(self.order[i])

    def completed(self) -> list[int]:
        """Each position's rank in the order the episodes finished (``reward_curve``'s x)."""
        return [rank for _, rank in sorted(zip(self.order, range(len(self.order)), strict=True))]


class Tally:
    """Rewards of the unmasked records, summed as they pass (the progress bar's and the result's mean)."""

    def __init__(self) -> None:
        self.total, self.n = 0.0, 0

    def add(self, record: dict[str, Any]) -> None:
        if not record.get("mask_sample"):
            self.total += float(record.get("reward") or 0.0)
            self.n += 1

    @property
    def mean(self) -> float:
        return self.total / self.n if self.n else float("nan")


class JsonlSink:
    """A record to the rollouts file, a failure to the failures file, each appended as it finishes."""

    def __init__(self, paths: dict[str, Path], failed_before: Iterable[Key], progress: tuple[int, int] | None = None):
        self.failed_before = set(failed_before)
        self.bar: Any = None
        if progress is not None:  # (total, already done): a progress bar
            from tqdm.auto import tqdm

            total, done = progress
            self.bar = tqdm(total=total, initial=done, desc=paths["rollouts"].name, unit="rollout", dynamic_ncols=True)
        self.recovered: set[Key] = set()  # keys of earlier failures that have a record now
        self.writer, self.fail_writer = LineWriter(paths["rollouts"]), LineWriter(paths["failures"])
        self.n_new = self.n_failed = 0
        self.tally = Tally()

    def __call__(self, job: Job, outcome: Outcome) -> None:
        row, agent_ref = job.row, job.target.agent_ref
        if outcome.record is not None:
            answer = outcome.answer or outcome.record.model_dump(mode="json", exclude_none=True)
            record = {
                **answer,
                **records.identity(task_index=row["_ng_task_index"], repeat=row["_ng_rollout_index"], agent=agent_ref),
            }
            for field in ("task_id", "rollout_id", "attempt"):
                if field in row and field not in record:
                    record[field] = row[field]
            self.writer.write(record)
            if (key := key_of(record)) in self.failed_before:
                self.recovered.add(key)
            self.n_new += 1
            self.tally.add(record)
        else:
            assert outcome.failure is not None  # an outcome is a record or a failure
            status = getattr(outcome.error, "status", None)
            self.fail_writer.write(
                failure_row({**row, "agent_ref": agent_ref}, outcome.failure, attempts=outcome.attempts, status=status)
            )
            self.n_failed += 1
        if self.bar is not None:
            shown = f"{self.tally.mean:.3f}" if self.tally.n else "-"
            self.bar.set_postfix(mean_reward=shown, failed=self.n_failed, refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        self.writer.close()
        self.fail_writer.close()
        if self.bar is not None:
            self.bar.close()
