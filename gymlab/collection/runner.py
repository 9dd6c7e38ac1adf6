"""Rollout collection (the run engine's JSONL sink): dataset rows in, rollout records out, resumable
JSONL files, each record written as it finishes (docs/collection.md)."""

from __future__ import annotations

import contextlib
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from gymlab._http.retry import RETRY_SPAN_S
from gymlab.collection.dispatch import HttpReplica, ReplicaPool, agent_pool
from gymlab.collection.engine import STOP_AFTER, Job, Outcome, Policy, run_jobs
from gymlab.collection.expand import check_rows, iter_expand
from gymlab.collection.files import Key, key_of, output_paths, rewrite_sorted
from gymlab.collection.metrics import aggregate
from gymlab.collection.shards import in_shard, record_shard
from gymlab.errors import ConfigError, DatasetError
from gymlab.jsonl import LineWriter, atomic_file, dumps, iter_appendable, read_appendable, write_text_atomic
from gymlab.protocol.record import identity, mean_reward_text

if TYPE_CHECKING:
    from gymlab._http.client import Client

#: Seconds one ``POST /run`` may take by default: longer than an agent's own episode budget
#: (``timeouts.episode``, 1800 s), so the agent's typed failure arrives first.
DEFAULT_ROLLOUT_TIMEOUT_S = 2000.0


@dataclass(frozen=True)
class Target:
    """Where one row goes: ``POST {url}/run``, recorded as ``agent_ref``; metrics from ``metrics_url``.
    ``replicas``: a ``ReplicaPool`` that runs it instead (``url`` then only names the target)."""

    url: str
    agent_ref: dict[str, Any]
    metrics_url: str | None = None
    replicas: ReplicaPool | None = field(default=None, compare=False)


@dataclass
class CollectResult:
    """What a collection produced; ``rollouts`` and ``failures`` are read from its files when asked
    (all of them, in "aabbcc" order): a collection holds none of its records in memory."""

    output: Path
    aggregate_metrics: dict[str, Any]
    n_new: int
    n_skipped: int
    n_rollouts: int
    n_failures: int
    mean_reward: float  # over the unmasked rollouts (``gymlab.protocol.record.mean_reward``)
    duration_s: float = 0.0

    @property
    def paths(self) -> dict[str, Path]:
        return output_paths(self.output)

    @property
    def rollouts(self) -> list[dict[str, Any]]:
        """Every record of the rollouts file."""
        return read_appendable(self.paths["rollouts"], repair=False)

    @property
    def failures(self) -> list[dict[str, Any]]:
        """Every row of the failures file."""
        return read_appendable(self.paths["failures"], repair=False, what="failures")

    def __repr__(self) -> str:
        return (
            f"<CollectResult {self.output}: {self.n_rollouts} rollouts ({self.n_new} new, "
            f"{self.n_skipped} already done), {self.n_failures} failed, {mean_reward_text(self.mean_reward)}>"
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


async def acollect(
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
    retry_span_s: float = RETRY_SPAN_S,
    timeout_s: float | None = DEFAULT_ROLLOUT_TIMEOUT_S,
    responses_create_params: dict | None = None,
    num_repeats_add_seed: bool = False,
    limit: int | None = None,
    shard: tuple[int, int] | str | None = None,
    stop_after: int | None = STOP_AFTER,
    progress: bool = True,
    client: Client | None = None,
) -> CollectResult:
    """Collect rollouts of ``rows`` (dicts, or a JSONL path) into ``output`` (docs/collection.md).

    Give ``agent_url`` (one URL, several of the same agent, or a ``ReplicaPool``; ``resources_url`` for
    its metrics) or ``route`` (row -> ``Target``). A failure whose kind may pass is retried ``max_retries``
    times, and on while its failures span under ``retry_span_s`` (``gymlab._http.retry.RETRY_SPAN_S``; backoff
    ``backoff_s``, doubling), then written to
    the failures file; when the first ``stop_after`` tries all fail alike the run stops with
    ``RunStopped`` (None: never). ``shard=(i, n)`` or ``"i/n"``: only shard i of n, for ``merge``.
    ``client``: the caller's (a Lab's, reaching its servers in-process), else one of the run's own.
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
    from gymlab._http.client import Client

    own = Client() if client is None else None  # its connections made on first use, closed with the run
    client = client or own
    if route is None:
        pool = agent_pool(agent_url, server=agent_name, client=client)
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
    total = n_skipped = 0
    for job, t in _recorded_inputs(paths["materialized_inputs"], jobs(), done):
        total += 1
        n_skipped += key_of(job) in done
        if t.url not in pools:
            server = str(t.agent_ref.get("name") or t.url)
            pools[t.url] = t.replicas or ReplicaPool([HttpReplica(t.url, server=server, client=client)])
        metrics_urls.setdefault(str(t.agent_ref.get("name")), t.metrics_url)
    pending = (
        Job(i, job, pools[t.url], str(t.agent_ref.get("name") or t.url), t)
        for i, (job, t) in enumerate(jobs())
        if key_of(job) not in done
    )
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=total, initial=n_skipped, desc=paths["rollouts"].name, unit="rollout", dynamic_ncols=True)
    failed_before = {key_of(f) for _, _, _, f in iter_appendable(paths["failures"], what="failures")}
    sink = JsonlSink(paths, failed_before, bar)
    policy = Policy(max_retries, backoff_s, timeout_s, stop_after, retry_span_s)
    async with own or contextlib.nullcontext():  # no connection pool outlives a caller's short-lived loop
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

        metrics = await aggregate(records(), metrics_urls, client)
    write_text_atomic(paths["aggregate_metrics"], json.dumps(metrics, indent=2, default=str))
    return CollectResult(
        paths["rollouts"],
        aggregate_metrics=metrics,
        n_new=sink.n_new,
        n_skipped=n_skipped,
        n_rollouts=n_rollouts,
        n_failures=n_failures,
        mean_reward=tally.mean,
        duration_s=time.perf_counter() - t0,
    )


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
    with atomic_file(path) as out:
        with open(path, "rb") if old else open(os.devnull, "rb") as source:
            for job, target in jobs:
                k = key_of(job)
                if (place := old.pop(k, None)) is not None and k in done:
                    source.seek(place[0])
                    if orjson.loads(source.read(place[1])) != job:
                        raise ConfigError(
                            f"{path}: task {k[0]} repeat {k[1]} was collected from a different input row; "
                            "write to another output, or delete the old files to start over"
                        )
                out.write(dumps(job) + b"\n")
                yield job, target
            for offset, length in old.values():  # the file's other keys, kept
                source.seek(offset)
                out.write(source.read(length))
    rewrite_sorted(path, what="materialized inputs")
