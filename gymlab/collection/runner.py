"""Rollout collection: dataset rows in, rollout records out, resumable JSONL.

``collect(rows, "out/run.jsonl", agent_url=...)`` runs every row ``repeats`` times ("aabbcc" order)
through ``POST /run`` of an agent (or environment) server, ``concurrency`` at a time, and writes:

- ``run.jsonl``: one rollout record per (task, repeat), the ``/run`` answer plus ``_ng_task_index``,
  ``_ng_rollout_index`` and ``agent_ref``; each line is written whole and flushed as it finishes;
- ``run_materialized_inputs.jsonl``: the rows exactly as sent;
- ``run_failures.jsonl``: the rows that still failed after the retries, with ``failure_kind`` and
  ``failure_reason`` (a rerun retries them);
- ``run_aggregate_metrics.json``: per agent, from its resources server's ``/aggregate_metrics`` when
  known, else computed here the same way.

Rerunning the same command resumes: finished (task, repeat) pairs are skipped. A partial last line
left by a crash is cut off with a message (its rollout runs again); a damaged line anywhere else is
an error naming the line, never dropped.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gymlab.collection.dispatch import HttpReplica, ReplicaPool, agent_pool
from gymlab.collection.expand import check_rows, expand
from gymlab.collection.files import Key, key_of, output_paths, sort_key
from gymlab.collection.metrics import aggregate
from gymlab.collection.shards import in_shard
from gymlab.errors import ConfigError, DatasetError, ReplicaGone, ServerError
from gymlab.failures import run_failure
from gymlab.jsonl import LineWriter, read_appendable, write_jsonl_atomic, write_text_atomic
from gymlab.protocol.record import identity
from gymlab.retry import backoff_delay

#: Seconds one ``POST /run`` may take by default: longer than an agent's own episode budget
#: (``timeouts.episode``, 1800 s), so the agent's typed failure arrives first.
DEFAULT_ROLLOUT_TIMEOUT_S = 2000.0

#: HTTP statuses worth retrying (0: no connection).
RETRY_STATUSES = frozenset({0, 408, 409, 425, 429, 500, 502, 503, 504})


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


@dataclass
class CollectResult:
    """What a collection produced: the records in the output file (all of them, in "aabbcc" order)."""

    output: Path
    rollouts: list[dict[str, Any]]
    failures: list[dict[str, Any]]
    aggregate_metrics: dict[str, Any]
    n_new: int
    n_skipped: int
    paths: dict[str, Path] = field(default_factory=dict)
    duration_s: float = 0.0

    @property
    def mean_reward(self) -> float:
        """Mean reward of the unmasked rollouts (``gymlab.protocol.record.mean_reward``)."""
        from gymlab.protocol.record import mean_reward

        return mean_reward(self.rollouts)

    def __repr__(self) -> str:
        return (
            f"<CollectResult {self.output}: {len(self.rollouts)} rollouts ({self.n_new} new, "
            f"{self.n_skipped} already done), {len(self.failures)} failed, mean reward {self.mean_reward:.3f} "
            "over the unmasked>"
        )


# -- one rollout ---------------------------------------------------------------------------------


async def _run_one(
    job: dict[str, Any],
    target: Target,
    pool: ReplicaPool,
    *,
    max_retries: int,
    backoff_s: float,
    timeout_s: float | None,
) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """One job to a record or a failure row. A job whose replica is gone moves at once to another
    live replica; the first move counts as one of its retries (never the reason it fails), later
    ones are free up to twice the pool's size (a replica probed back at once may be lost again)."""
    import aiohttp

    name = str(target.agent_ref.get("name") or target.url)
    attempt = retries = moves = 0
    while True:
        attempt += 1
        replica = pool.pick()
        try:
            result = await replica.run(job, timeout_s)
            if not isinstance(result, dict):
                raise ServerError(name, "POST /run", 200, f"answer is not a JSON object: {str(result)[:200]}")
            record = {
                **result,
                **identity(task_index=job["_ng_task_index"], repeat=job["_ng_rollout_index"], agent=target.agent_ref),
            }
            for k in ("task_id", "rollout_id", "attempt"):
                if k in job and k not in record:
                    record[k] = job[k]
            return record, None
        except ReplicaGone as gone:
            if pool.lose(replica):
                moves += 1
                retries += 1 if moves == 1 or moves > 2 * len(pool) else 0
                if retries <= max_retries + 1:  # the first move is never the reason a job fails
                    continue
            exc = gone.__cause__ if isinstance(gone.__cause__, ServerError) else gone
            failure = run_failure(exc, name) if exc is not gone else gone.failure
        except (TimeoutError, ServerError, aiohttp.ClientError, OSError) as err:
            failure, exc = run_failure(err, name), err
        finally:
            pool.done(replica)
        retry = getattr(exc, "status", 0) in RETRY_STATUSES or isinstance(exc, asyncio.TimeoutError)
        if not retry or retries >= max_retries:
            return None, {
                **job,
                "agent_ref": target.agent_ref,
                "failure_kind": failure.kind,
                "failure_reason": failure.message or str(exc),
                "failure_stage": failure.stage,
                "failure_server": failure.server,
                "attempts": attempt,
                "status": getattr(exc, "status", None),
            }
        retries += 1
        await asyncio.sleep(backoff_delay(backoff_s, retries))


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
    progress: bool = True,
) -> CollectResult:
    """Collect rollouts of ``rows`` (dicts, or a JSONL path) into ``output`` (see the module doc).

    Give ``agent_url`` (every row to that server's ``/run``; ``resources_url`` for its metrics) or
    ``route`` (row -> ``Target``, for configs with several agents or environment servers).
    ``agent_url`` may list several URLs of the same agent, or be a ``ReplicaPool``: each rollout
    goes to the one with the fewest in flight, and a replica that is gone (refused, reset) hands
    its rollouts to the others. Failed rollouts are retried ``max_retries`` times (backoff
    ``backoff_s``, doubling) when the error may pass (connection, 5xx, timeout), then written to
    the failures file. ``shard=(i, n)`` (or ``"i/n"``) collects only the tasks of shard i of n
    (1-based; see ``shards``), for ``merge`` to join later.
    """
    t0 = time.perf_counter()
    if isinstance(rows, (str, os.PathLike)):
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

    jobs = expand(
        rows, repeats, responses_create_params=responses_create_params, num_repeats_add_seed=num_repeats_add_seed
    )
    if shard is not None:
        jobs = in_shard(jobs, shard)
    targets = [route(job) for job in jobs]
    for job, target in zip(jobs, targets):
        job.setdefault("agent_ref", target.agent_ref)

    paths = output_paths(output)
    done = {key_of(r): r for r in _checked_done(paths["rollouts"])}
    _check_materialized(paths["materialized_inputs"], jobs, done)
    old_failures = read_appendable(paths["failures"], what="failures")
    pools: dict[str, ReplicaPool] = {}
    for t in targets:
        if t.url not in pools:
            server = str(t.agent_ref.get("name") or t.url)
            pools[t.url] = t.replicas if t.replicas is not None else ReplicaPool([HttpReplica(t.url, server=server)])
    pending = deque((job, t) for job, t in zip(jobs, targets) if key_of(job) not in done)
    n_skipped = len(jobs) - len(pending)

    rewards = [float(r.get("reward", 0.0)) for r in done.values() if not r.get("mask_sample")]
    bar = _progress_bar(len(jobs), n_skipped, str(paths["rollouts"].name)) if progress else None
    new_failures: list[dict[str, Any]] = []
    writer, fail_writer = LineWriter(paths["rollouts"]), LineWriter(paths["failures"])
    n_new = 0

    async def worker() -> None:
        nonlocal n_new
        while pending:
            job, target = pending.popleft()
            record, failure = await _run_one(
                job, target, pools[target.url], max_retries=max_retries, backoff_s=backoff_s, timeout_s=timeout_s
            )
            if record is not None:
                writer.write(record)
                done[key_of(record)] = record
                n_new += 1
                if not record.get("mask_sample"):
                    rewards.append(float(record.get("reward", 0.0)))
            else:
                fail_writer.write(failure)
                new_failures.append(failure)
            if bar is not None:
                bar.set_postfix(
                    mean_reward=f"{sum(rewards) / len(rewards):.3f}" if rewards else "-",
                    failed=len(new_failures),
                    refresh=False,
                )
                bar.update(1)

    tasks = [asyncio.ensure_future(worker()) for _ in range(max(1, min(concurrency, len(pending))))]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:  # on an error or a cancel, no worker may write after the files close
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for p in pools.values():
            await p.aclose()
        writer.close()
        fail_writer.close()
        if bar is not None:
            bar.close()

    records = sorted(done.values(), key=sort_key)
    write_jsonl_atomic(paths["rollouts"], records)
    latest = {key_of(f): f for f in [*old_failures, *new_failures] if key_of(f) not in done}
    failures = sorted(latest.values(), key=sort_key)
    write_jsonl_atomic(paths["failures"], failures)
    metrics_urls = {str(t.agent_ref.get("name")): t.metrics_url for t in targets}
    metrics = await aggregate(records, metrics_urls)
    write_text_atomic(paths["aggregate_metrics"], json.dumps(metrics, indent=2, default=str))
    return CollectResult(
        output=paths["rollouts"],
        rollouts=records,
        failures=failures,
        aggregate_metrics=metrics,
        n_new=n_new,
        n_skipped=n_skipped,
        paths=paths,
        duration_s=time.perf_counter() - t0,
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
    rollout kept, and the same call resumes it."""
    import concurrent.futures

    from gymlab._sync import background_loop

    future = asyncio.run_coroutine_threadsafe(acollect(rows, output, **options), background_loop())
    try:
        return future.result()
    except KeyboardInterrupt:
        future.cancel()
        try:
            future.result(10)
        except (concurrent.futures.CancelledError, concurrent.futures.TimeoutError, Exception):
            pass
        raise


def _checked_done(path: Path) -> list[dict[str, Any]]:
    records = read_appendable(path)
    seen: dict[Key, int] = {}
    for i, record in enumerate(records):
        k = key_of(record)
        if k in seen:
            raise DatasetError(
                str(path),
                None,
                f"records {seen[k] + 1} and {i + 1} are both (task {k[0]}, repeat {k[1]}); remove one, then rerun",
            )
        seen[k] = i
    return records


def _check_materialized(path: Path, jobs: list[dict[str, Any]], done: dict[Key, dict]) -> None:
    """Refuse to resume onto rollouts of different inputs; then record the inputs (union)."""
    old = {key_of(r): r for r in read_appendable(path, what="materialized inputs")}
    for job in jobs:
        k = key_of(job)
        if k in old and k in done and old[k] != job:
            raise ConfigError(
                f"{path}: task {k[0]} repeat {k[1]} was collected from a different input row; "
                "write to another output, or delete the old files to start over"
            )
    merged = {**old, **{key_of(j): j for j in jobs}}
    if merged != old:
        write_jsonl_atomic(path, sorted(merged.values(), key=sort_key))


def _progress_bar(total: int, initial: int, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit="rollout", dynamic_ncols=True)
