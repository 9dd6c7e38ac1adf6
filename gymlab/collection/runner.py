"""Rollout collection: dataset rows in, rollout records out, resumable JSONL.

``collect(rows, "out/run.jsonl", agent_url=...)`` runs every row ``repeats`` times ("aabbcc" order)
through ``POST /run`` of an agent (or environment) server, ``concurrency`` at a time, and writes:

- ``run.jsonl``: one rollout record per (task, repeat), the ``/run`` answer plus ``_ng_task_index``,
  ``_ng_rollout_index`` and ``agent_ref``; each line is written whole and flushed as it finishes;
- ``run_materialized_inputs.jsonl``: the rows exactly as sent;
- ``run_failures.jsonl``: the rows that failed, with ``failure_kind`` and ``failure_reason``: a
  failure whose kind may pass (transport, provider) after its retries, any other at once (a rerun
  retries them);
- ``run_aggregate_metrics.json``: per agent, from its resources server's ``/aggregate_metrics`` when
  known, else computed here the same way.

Episodes run on the one run engine (``engine``); this module is its JSONL sink: each record is
written as it finishes and then dropped, so a collection's memory does not grow with its episodes
(the files are put in (task, repeat) order at the end from each line's key and place alone).

Rerunning the same command resumes: finished (task, repeat) pairs are skipped. A partial last line
left by a crash is cut off with a message (its rollout runs again); a damaged line anywhere else is
an error naming the line, never dropped.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from gymlab.collection.dispatch import HttpReplica, ReplicaPool, agent_pool
from gymlab.collection.engine import STOP_AFTER, Job, Outcome, Policy, run_jobs
from gymlab.collection.expand import check_rows, iter_expand
from gymlab.collection.files import Key, key_of, output_paths, rewrite_sorted
from gymlab.collection.metrics import aggregate
from gymlab.collection.shards import in_shard, record_shard
from gymlab.errors import ConfigError, DatasetError
from gymlab.jsonl import LineWriter, atomic_file, dumps, iter_appendable, read_appendable, write_text_atomic
from gymlab.protocol.record import identity

#: Seconds one ``POST /run`` may take by default: longer than an agent's own episode budget
#: (``timeouts.episode``, 1800 s), so the agent's typed failure arrives first.
DEFAULT_ROLLOUT_TIMEOUT_S = 2000.0


@dataclass(frozen=True)
class Target:
    """Where one row goes: ``POST {url}/run``, recorded as ``agent_ref``; metrics from ``metrics_url``.

    ``replicas``: interchangeable replicas of this target (``dispatch.ReplicaPool``: several agent
    URLs, Ray cells) instead of the one server at ``url``; ``url`` then only names the target.
    """

    url: str
    agent_ref: dict[str, Any]
    metrics_url: str | None = None
    replicas: ReplicaPool | None = field(default=None, compare=False)


class CollectResult:
    """What a collection produced. ``rollouts`` and ``failures`` are read from the files when asked
    (all of them, in "aabbcc" order): a collection holds none of its records in memory."""

    def __init__(
        self,
        output: Path,
        *,
        aggregate_metrics: dict[str, Any],
        n_new: int,
        n_skipped: int,
        paths: dict[str, Path] | None = None,
        duration_s: float = 0.0,
        rollouts: list[dict[str, Any]] | None = None,
        failures: list[dict[str, Any]] | None = None,
        counts: tuple[int, int, float] | None = None,
    ):
        self.output, self.aggregate_metrics = Path(output), aggregate_metrics
        self.n_new, self.n_skipped, self.duration_s = n_new, n_skipped, duration_s
        self.paths = paths or output_paths(output)
        self._rollouts, self._failures = rollouts, failures
        self._counts = counts  # (rollouts, failures, mean reward), when the writer counted them

    @property
    def rollouts(self) -> list[dict[str, Any]]:
        """Every record of the rollouts file."""
        return self._rollouts if self._rollouts is not None else read_appendable(self.paths["rollouts"], repair=False)

    @property
    def failures(self) -> list[dict[str, Any]]:
        """Every row of the failures file."""
        if self._failures is not None:
            return self._failures
        return read_appendable(self.paths["failures"], repair=False, what="failures")

    @property
    def n_rollouts(self) -> int:
        return self._counts[0] if self._counts else len(self.rollouts)

    @property
    def n_failures(self) -> int:
        return self._counts[1] if self._counts else len(self.failures)

    @property
    def mean_reward(self) -> float:
        """Mean reward of the unmasked rollouts (``gymlab.protocol.record.mean_reward``)."""
        from gymlab.protocol.record import mean_reward

        return self._counts[2] if self._counts else mean_reward(self.rollouts)

    def __repr__(self) -> str:
        return (
            f"<CollectResult {self.output}: {self.n_rollouts} rollouts ({self.n_new} new, "
            f"{self.n_skipped} already done), {self.n_failures} failed, mean reward {self.mean_reward:.3f} "
            "over the unmasked>"
        )


class _Tally:
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
    """The engine's JSONL sink: a record to the rollouts file, a failure to the failures file, each
    appended whole as it finishes and then dropped."""

    def __init__(self, paths: dict[str, Path], failed_before: set[Key], bar: Any = None):
        self.failed_before, self.bar = failed_before, bar
        self.recovered: set[Key] = set()  # keys of earlier failures that have a record now
        self.writer, self.fail_writer = LineWriter(paths["rollouts"]), LineWriter(paths["failures"])
        self.n_new = self.n_failed = 0
        self.tally = _Tally()

    def __call__(self, job: Job, outcome: Outcome) -> None:
        row, target = job.row, job.target
        if outcome.record is not None:
            answer = outcome.answer or outcome.record.model_dump(mode="json", exclude_none=True)
            record = {
                **answer,
                **identity(task_index=row["_ng_task_index"], repeat=row["_ng_rollout_index"], agent=target.agent_ref),
            }
            for k in ("task_id", "rollout_id", "attempt"):
                if k in row and k not in record:
                    record[k] = row[k]
            self.writer.write(record)
            if (k := key_of(record)) in self.failed_before:
                self.recovered.add(k)
            self.n_new += 1
            self.tally.add(record)
        else:
            failure = outcome.failure
            self.fail_writer.write(
                {
                    **row,
                    "agent_ref": target.agent_ref,
                    "failure_kind": failure.kind,
                    "failure_reason": failure.message or str(outcome.error),
                    "failure_stage": failure.stage,
                    "failure_server": failure.server,
                    "attempts": outcome.attempts,
                    "status": getattr(outcome.error, "status", None),
                }
            )
            self.n_failed += 1
        if self.bar is not None:
            self.bar.set_postfix(
                mean_reward=f"{self.tally.mean:.3f}" if self.tally.n else "-", failed=self.n_failed, refresh=False
            )
            self.bar.update(1)

    def close(self) -> None:
        self.writer.close()
        self.fail_writer.close()


# -- collection --------------------------------------------------------------------------------


async def _acollect(
    rows: Iterable[dict[str, Any]] | str | os.PathLike,
    output: str | os.PathLike,
    *,
    agent_url: str | Sequence[str] | ReplicaPool | None = None,
    route: Callable[[dict[str, Any]], Target] | None = None,
    agent_name: str | None = None,
    resources_url: str | None = None,
    repeats: int = 1,
    concurrency: int = 16,
    max_retries: int = 2,
    backoff_s: float = 0.5,
    timeout_s: float | None = DEFAULT_ROLLOUT_TIMEOUT_S,
    responses_create_params: dict | None = None,
    num_repeats_add_seed: bool = False,
    limit: int | None = None,
    shard: tuple[int, int] | str | None = None,
    stop_after: int | None = STOP_AFTER,
    progress: bool = True,
) -> CollectResult:
    """Collect rollouts of ``rows`` (dicts, or a JSONL path) into ``output`` (see the module doc).

    Give ``agent_url`` (every row to that server's ``/run``; ``resources_url`` for its metrics) or
    ``route`` (row -> ``Target``, for configs with several agents or environment servers).
    ``agent_url`` may list several URLs of the same agent, or be a ``ReplicaPool``: each rollout
    goes to the one with the fewest in flight, and a replica that is gone (refused, reset) hands
    its rollouts to the others. A failed rollout whose kind may pass (transport, provider:
    ``gymlab.retry.retried``) is retried ``max_retries`` times and over ``gymlab.retry.RETRY_SPAN_S``
    at least (backoff ``backoff_s``, doubling); any failure is then written to the failures file.
    When the first ``stop_after`` tries all fail alike (``engine.Breaker``) the run stops with
    ``RunStopped`` saying why (None: never). ``shard=(i, n)`` (or ``"i/n"``) collects only
    the tasks of shard i of n (1-based; see ``shards``), for ``merge`` to join later.
    """
    t0 = time.perf_counter()
    is_path = isinstance(rows, (str, os.PathLike))
    if hasattr(rows, "launch_order") or (is_path and str(rows).endswith((".yaml", ".yml"))):
        raise ConfigError(
            f"{rows}: a config is collected by gymlab.collect(config, output, ...), which serves its servers "
            "for the run; acollect takes rows and an agent_url or route"
        )
    if is_path:
        from gymlab.collection.config_rows import read_rows

        rows = read_rows(rows, flat="auto")  # errors name the file's own line numbers
    else:
        rows = check_rows(rows)
    rows = rows[:limit] if limit is not None else rows
    if (agent_url is None) == (route is None):
        raise ConfigError("give exactly one of agent_url= (one agent server) or route= (row -> Target)")
    if route is None:
        pool = agent_pool(agent_url, server=agent_name)
        default_ref = {"type": "responses_api_agents", "name": agent_name or pool.name}

        def route(row: dict[str, Any]) -> Target:
            ref = {"type": "responses_api_agents", "name": agent_name} if agent_name else row.get("agent_ref")
            return Target(pool.name, ref or default_ref, resources_url, pool)

    def jobs() -> Iterator[tuple[dict[str, Any], Target]]:
        """The jobs, made as they are read (twice: once to check and record them, once to run them)."""
        expanded = iter_expand(
            rows, repeats, responses_create_params=responses_create_params, num_repeats_add_seed=num_repeats_add_seed
        )
        for job in in_shard(expanded, shard) if shard is not None else expanded:
            target = route(job)
            job.setdefault("agent_ref", target.agent_ref)
            yield job, target

    paths = output_paths(output)
    if shard is not None:
        options = [repeats, responses_create_params, num_repeats_add_seed]
        record_shard(paths["shard"], shard, rows, options=options)
    done = _checked_done(paths["rollouts"])
    pools: dict[str, ReplicaPool] = {}
    metrics_urls: dict[str, str | None] = {}
    total = 0
    for _job, t in _recorded_inputs(paths["materialized_inputs"], jobs(), done):
        total += 1
        if t.url not in pools:
            server = str(t.agent_ref.get("name") or t.url)
            pools[t.url] = t.replicas if t.replicas is not None else ReplicaPool([HttpReplica(t.url, server=server)])
        metrics_urls.setdefault(str(t.agent_ref.get("name")), t.metrics_url)
    pending = (
        Job(i, job, pools[t.url], str(t.agent_ref.get("name") or t.url), t)
        for i, (job, t) in enumerate(jobs())
        if key_of(job) not in done
    )
    n_skipped = sum(1 for job, _ in jobs() if key_of(job) in done) if done else 0
    bar = _progress_bar(total, n_skipped, str(paths["rollouts"].name)) if progress else None
    failed_before = {key_of(f) for _, _, _, f in iter_appendable(paths["failures"], what="failures")}
    sink = JsonlSink(paths, failed_before, bar)
    policy = Policy(max_retries=max_retries, backoff_s=backoff_s, timeout_s=timeout_s, stop_after=stop_after)
    try:
        await run_jobs(pending, sink, concurrency=max(1, min(concurrency, total - n_skipped)), policy=policy)
    finally:
        for p in pools.values():
            await p.aclose()
        sink.close()
        if bar is not None:
            bar.close()

    n_rollouts = rewrite_sorted(paths["rollouts"])
    n_failures = rewrite_sorted(
        paths["failures"], keep=lambda k: k not in done and k not in sink.recovered, what="failures"
    )
    tally = _Tally()

    def records() -> Iterator[dict[str, Any]]:
        for _, _, _, record in iter_appendable(paths["rollouts"], repair=False):
            tally.add(record)
            yield record

    metrics = await aggregate(records(), metrics_urls)
    write_text_atomic(paths["aggregate_metrics"], json.dumps(metrics, indent=2, default=str))
    return CollectResult(
        paths["rollouts"],
        aggregate_metrics=metrics,
        n_new=sink.n_new,
        n_skipped=n_skipped,
        paths=paths,
        duration_s=time.perf_counter() - t0,
        counts=(n_rollouts, n_failures, tally.mean),
    )


async def acollect(
    rows: Iterable[dict[str, Any]] | str | os.PathLike, output: str | os.PathLike, **options: Any
) -> CollectResult:
    from gymlab.client import http_scope

    async with http_scope():
        return await _acollect(rows, output, **options)


acollect.__doc__ = _acollect.__doc__


def collect(
    rows: Iterable[dict[str, Any]] | str | os.PathLike, output: str | os.PathLike, **options: Any
) -> CollectResult:
    """``acollect`` from sync code (a script, a kernel cell); Ctrl-C stops it with every finished
    rollout kept (``gymlab._sync.run_sync``), and the same call resumes it."""
    from gymlab._sync import run_sync

    return run_sync(acollect(rows, output, **options))


def _checked_done(path: Path) -> set[Key]:
    """The (task, repeat) keys already in the rollouts file; a key written twice is an error."""
    seen: dict[Key, int] = {}
    for i, (_, _, _, record) in enumerate(iter_appendable(path)):
        k = key_of(record)
        if k in seen:
            raise DatasetError(
                str(path),
                None,
                f"records {seen[k] + 1} and {i + 1} are both (task {k[0]}, repeat {k[1]}); remove one, then rerun",
            )
        seen[k] = i
    return set(seen)


def _recorded_inputs(path: Path, jobs: Iterator[tuple[dict[str, Any], Any]], done: set[Key]) -> Iterator[Any]:
    """``jobs``, passed on while they are written to the inputs file (with the inputs of the file's
    other keys kept); resuming onto rollouts of different inputs is refused before anything runs."""
    old = {key_of(r): (offset, len(line)) for _, offset, line, r in iter_appendable(path, what="materialized inputs")}
    sent: set[Key] = set()
    with atomic_file(path) as out:
        with open(path, "rb") if old else open(os.devnull, "rb") as source:
            for job, target in jobs:
                k = key_of(job)
                if k in old and k in done:
                    source.seek(old[k][0])
                    if orjson.loads(source.read(old[k][1])) != job:
                        raise ConfigError(
                            f"{path}: task {k[0]} repeat {k[1]} was collected from a different input row; "
                            "write to another output, or delete the old files to start over"
                        )
                if old:  # which of the file's other keys to keep
                    sent.add(k)
                out.write(dumps(job) + b"\n")
                yield job, target
            for k, (offset, length) in old.items():
                if k not in sent:
                    source.seek(offset)
                    out.write(source.read(length))
    rewrite_sorted(path, what="materialized inputs")


def _progress_bar(total: int, initial: int, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit="rollout", dynamic_ncols=True)
