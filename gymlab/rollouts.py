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
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from gymlab.errors import ConfigError, DatasetError, ServerError
from gymlab.failures import run_failure
from gymlab.retry import backoff_delay

Key = tuple[Any, Any]

#: Seconds one ``POST /run`` may take by default: longer than an agent's own episode budget
#: (``timeouts.episode``, 1800 s), so the agent's typed failure arrives first.
DEFAULT_ROLLOUT_TIMEOUT_S = 2000.0

#: HTTP statuses worth retrying (0: no connection).
RETRY_STATUSES = frozenset({0, 408, 409, 425, 429, 500, 502, 503, 504})


@dataclass(frozen=True)
class Target:
    """Where one row goes: ``POST {url}/run``, recorded as ``agent_ref``; metrics from ``metrics_url``."""

    url: str
    agent_ref: dict[str, Any]
    metrics_url: str | None = None


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
        return (f"<CollectResult {self.output}: {len(self.rollouts)} rollouts ({self.n_new} new, "
                f"{self.n_skipped} already done), {len(self.failures)} failed, mean reward {self.mean_reward:.3f}>")


def output_paths(output: str | os.PathLike) -> dict[str, Path]:
    """The four files of a collection named after ``output`` (``NAME.jsonl``)."""
    out = Path(output)
    stem = out.with_suffix("") if out.suffix == ".jsonl" else out
    return {
        "rollouts": stem.with_name(stem.name + ".jsonl"),
        "materialized_inputs": stem.with_name(stem.name + "_materialized_inputs.jsonl"),
        "failures": stem.with_name(stem.name + "_failures.jsonl"),
        "aggregate_metrics": stem.with_name(stem.name + "_aggregate_metrics.json"),
    }


def key_of(record: dict[str, Any]) -> Key:
    return (record.get("_ng_task_index"), record.get("_ng_rollout_index"))


# -- jobs --------------------------------------------------------------------------------------

def check_rows(rows: Iterable[dict[str, Any]], source: str = "rows") -> list[dict[str, Any]]:
    """Rows as a list, each a JSON object; flat rows need a valid ``responses_create_params``
    (collated taskset rows, with ``task_input``, are checked by their environment server)."""
    from gymlab.datasets import check_flat_row

    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise DatasetError(source, i + 1, f"a row is a JSON object (dict), not {type(row).__name__}")
        if "task_input" not in row:
            check_flat_row(row, source, i + 1)
        out.append(row)
    return out


def expand(rows: list[dict[str, Any]], repeats: int = 1, *, responses_create_params: dict | None = None,
           num_repeats_add_seed: bool = False) -> list[dict[str, Any]]:
    """Every row ``repeats`` times in "aabbcc" order, with ``_ng_task_index`` and ``_ng_rollout_index``.

    A row's own ``_ng_task_index`` is kept (else its position). A row that already has
    ``_ng_rollout_index`` is already materialized and runs once, as it is. Taskset rows (with
    ``task_input``) refuse run-level request overrides and ``num_repeats_add_seed``.
    """
    from gymlab.datasets import apply_run_overrides

    if repeats < 1:
        raise ConfigError(f"repeats must be at least 1, got {repeats}")
    jobs: list[dict[str, Any]] = []
    seen: dict[Key, int] = {}
    for position, row in enumerate(rows):
        if "task_input" in row and (responses_create_params or num_repeats_add_seed):
            what = "run-level responses_create_params overrides" if responses_create_params else "num_repeats_add_seed"
            raise ConfigError(f"row {position + 1} ({row.get('task_id')}): taskset rows refuse {what}; "
                              "set response parameters in the source row before collation")
        task = row.get("_ng_task_index", position)
        if "_ng_rollout_index" in row:
            if repeats != 1:
                raise ConfigError(f"row {position + 1} is already materialized (has _ng_rollout_index); "
                                  "run materialized inputs with repeats=1")
            expanded = [dict(row)]
        else:
            expanded = []
            for r in range(repeats):
                base = row if "task_input" in row else apply_run_overrides(
                    row, responses_create_params, r, num_repeats_add_seed and repeats > 1)
                expanded.append({**base, "_ng_task_index": task, "_ng_rollout_index": r})
        for job in expanded:
            k = key_of(job)
            if k in seen:
                raise DatasetError("rows", position + 1, f"(task {k[0]}, repeat {k[1]}) already comes from row "
                                                         f"{seen[k] + 1}; each row needs its own _ng_task_index")
            seen[k] = position
            jobs.append(job)
    return jobs


# -- files -------------------------------------------------------------------------------------

def read_records(path: Path, *, repair: bool = True, what: str = "rollouts") -> list[dict[str, Any]]:
    """The records of a JSONL file we append to. A partial last line (a crash mid-write) is cut off
    with a message; a bad complete line is an error naming its line number."""
    if not path.exists():
        return []
    data = path.read_bytes()
    records = []
    complete_end = data.rfind(b"\n") + 1
    for number, line in enumerate(data[:complete_end].split(b"\n")[:-1], 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError as exc:
            raise DatasetError(str(path), number, f"damaged {what} line ({exc}); fix or delete that line, "
                                                  "then rerun to redo its rollout") from None
        if not isinstance(record, dict):
            raise DatasetError(str(path), number, f"a {what} line is a JSON object, not {type(record).__name__}")
        records.append(record)
    tail = data[complete_end:]
    if tail.strip():
        try:
            record = json.loads(tail)
            complete = isinstance(record, dict)
        except ValueError:
            complete = False
        if complete:  # whole record, only its newline missing
            records.append(record)
            if repair:
                with open(path, "ab") as f:
                    f.write(b"\n")
        elif repair:
            print(f"gymlab collect: {path}: removed a partial last line ({len(tail)} bytes) left by an "
                  "interrupted run; its rollout will run again", file=sys.stderr)
            with open(path, "r+b") as f:
                f.truncate(complete_end)
    return records


class _LineWriter:
    """Appends whole lines with one ``os.write`` each (no user-space buffer to lose on a kill)."""

    def __init__(self, path: Path):
        path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def write(self, record: dict[str, Any]) -> None:
        data = (json.dumps(record, ensure_ascii=False, default=str) + "\n").encode("utf-8")
        while data:
            data = data[os.write(self.fd, data):]

    def close(self) -> None:
        os.close(self.fd)


def _write_atomic(path: Path, records: Iterable[dict[str, Any]]) -> None:
    from gymlab.rollout_files import write_jsonl_atomic

    write_jsonl_atomic(path, records)


# -- one rollout ---------------------------------------------------------------------------------

async def _run_one(job: dict[str, Any], target: Target, *, max_retries: int, backoff_s: float,
                   timeout_s: float | None) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    import aiohttp

    from gymlab.client import post_ok

    name = str(target.agent_ref.get("name") or target.url)
    attempt = 0
    while True:
        attempt += 1
        try:
            result = await post_ok(target.url, "/run", job, server=name, timeout=timeout_s)
            if not isinstance(result, dict):
                raise ServerError(name, "POST /run", 200, f"answer is not a JSON object: {str(result)[:200]}")
            record = {**result, "_ng_task_index": job["_ng_task_index"],
                      "_ng_rollout_index": job["_ng_rollout_index"], "agent_ref": target.agent_ref}
            for k in ("task_id", "rollout_id", "attempt"):
                if k in job and k not in record:
                    record[k] = job[k]
            return record, None
        except (ServerError, asyncio.TimeoutError, aiohttp.ClientError, OSError) as exc:
            failure = run_failure(exc, name)
            retry = getattr(exc, "status", 0) in RETRY_STATUSES or isinstance(exc, asyncio.TimeoutError)
            if not retry or attempt > max_retries:
                return None, {**job, "agent_ref": target.agent_ref, "failure_kind": failure.kind,
                              "failure_reason": failure.message or str(exc), "failure_stage": failure.stage,
                              "failure_server": failure.server, "attempts": attempt,
                              "status": getattr(exc, "status", None)}
            await asyncio.sleep(backoff_delay(backoff_s, attempt))


# -- collection --------------------------------------------------------------------------------

async def _acollect(rows: Iterable[dict[str, Any]] | str | os.PathLike, output: str | os.PathLike, *,
                   agent_url: str | None = None, route: Callable[[dict[str, Any]], Target] | None = None,
                   agent_name: str | None = None, resources_url: str | None = None, repeats: int = 1,
                   concurrency: int = 16, max_retries: int = 2, backoff_s: float = 0.5,
                   timeout_s: float | None = DEFAULT_ROLLOUT_TIMEOUT_S, responses_create_params: dict | None = None,
                   num_repeats_add_seed: bool = False, limit: int | None = None,
                   progress: bool = True) -> CollectResult:
    """Collect rollouts of ``rows`` (dicts, or a JSONL path) into ``output`` (see the module doc).

    Give ``agent_url`` (every row to that server's ``/run``; ``resources_url`` for its metrics) or
    ``route`` (row -> ``Target``, for configs with several agents or environment servers).
    Failed rollouts are retried ``max_retries`` times (backoff ``backoff_s``, doubling) when the
    error may pass (connection, 5xx, timeout), then written to the failures file.
    """
    t0 = time.perf_counter()
    if isinstance(rows, (str, os.PathLike)):
        from gymlab.datasets import read_jsonl

        rows = read_jsonl(rows, flat="auto")  # errors name the file's own line numbers
    else:
        rows = check_rows(rows)
    rows = rows[:limit] if limit is not None else rows
    if (agent_url is None) == (route is None):
        raise ConfigError("give exactly one of agent_url= (one agent server) or route= (row -> Target)")
    if route is None:
        default_ref = {"type": "responses_api_agents", "name": agent_name or agent_url}

        def route(row: dict[str, Any]) -> Target:
            ref = {"type": "responses_api_agents", "name": agent_name} if agent_name else row.get("agent_ref")
            return Target(agent_url, ref or default_ref, resources_url)

    jobs = expand(rows, repeats, responses_create_params=responses_create_params,
                  num_repeats_add_seed=num_repeats_add_seed)
    targets = [route(job) for job in jobs]
    for job, target in zip(jobs, targets):
        job.setdefault("agent_ref", target.agent_ref)

    paths = output_paths(output)
    done = {key_of(r): r for r in _checked_done(paths["rollouts"])}
    _check_materialized(paths["materialized_inputs"], jobs, done)
    old_failures = read_records(paths["failures"], what="failures")
    pending = deque((job, t) for job, t in zip(jobs, targets) if key_of(job) not in done)
    n_skipped = len(jobs) - len(pending)

    rewards = [float(r.get("reward", 0.0)) for r in done.values() if not r.get("mask_sample")]
    bar = _progress_bar(len(jobs), n_skipped, str(paths["rollouts"].name)) if progress else None
    new_failures: list[dict[str, Any]] = []
    writer, fail_writer = _LineWriter(paths["rollouts"]), _LineWriter(paths["failures"])
    n_new = 0

    async def worker() -> None:
        nonlocal n_new
        while pending:
            job, target = pending.popleft()
            record, failure = await _run_one(job, target, max_retries=max_retries, backoff_s=backoff_s,
                                             timeout_s=timeout_s)
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
                bar.set_postfix(mean_reward=f"{sum(rewards) / len(rewards):.3f}" if rewards else "-",
                                failed=len(new_failures), refresh=False)
                bar.update(1)

    tasks = [asyncio.ensure_future(worker()) for _ in range(max(1, min(concurrency, len(pending))))]
    try:
        await asyncio.gather(*tasks)
    finally:
        for task in tasks:  # on an error or a cancel, no worker may write after the files close
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        writer.close()
        fail_writer.close()
        if bar is not None:
            bar.close()

    records = sorted(done.values(), key=_sort_key)
    _write_atomic(paths["rollouts"], records)
    latest = {key_of(f): f for f in [*old_failures, *new_failures] if key_of(f) not in done}
    failures = sorted(latest.values(), key=_sort_key)
    _write_atomic(paths["failures"], failures)
    metrics_urls = {str(t.agent_ref.get("name")): t.metrics_url for t in targets}
    metrics = await _aggregate(records, metrics_urls)
    paths["aggregate_metrics"].write_text(json.dumps(metrics, indent=2, default=str) + "\n", encoding="utf-8")
    return CollectResult(output=paths["rollouts"], rollouts=records, failures=failures, aggregate_metrics=metrics,
                         n_new=n_new, n_skipped=n_skipped, paths=paths, duration_s=time.perf_counter() - t0)


async def acollect(rows: Iterable[dict[str, Any]] | str | os.PathLike, output: str | os.PathLike,
                   **options: Any) -> CollectResult:
    from gymlab.client import http_scope

    async with http_scope():
        return await _acollect(rows, output, **options)


acollect.__doc__ = _acollect.__doc__


def collect(rows: Iterable[dict[str, Any]] | str | os.PathLike, output: str | os.PathLike,
            **options: Any) -> CollectResult:
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


def _sort_key(record: dict[str, Any]) -> tuple:
    t, r = key_of(record)
    return (str(type(t)), t if t is not None else 0, r if r is not None else 0)


def _checked_done(path: Path) -> list[dict[str, Any]]:
    records = read_records(path)
    seen: dict[Key, int] = {}
    for i, record in enumerate(records):
        k = key_of(record)
        if k in seen:
            raise DatasetError(str(path), None, f"records {seen[k] + 1} and {i + 1} are both (task {k[0]}, "
                                                f"repeat {k[1]}); remove one, then rerun")
        seen[k] = i
    return records


def _check_materialized(path: Path, jobs: list[dict[str, Any]], done: dict[Key, dict]) -> None:
    """Refuse to resume onto rollouts of different inputs; then record the inputs (union)."""
    old = {key_of(r): r for r in read_records(path, what="materialized inputs")}
    for job in jobs:
        k = key_of(job)
        if k in old and k in done and old[k] != job:
            raise ConfigError(
                f"{path}: task {k[0]} repeat {k[1]} was collected from a different input row; "
                "write to another output, or delete the old files to start over"
            )
    merged = {**old, **{key_of(j): j for j in jobs}}
    if merged != old:
        _write_atomic(path, sorted(merged.values(), key=_sort_key))


async def _aggregate(records: list[dict[str, Any]], metrics_urls: dict[str, str | None]) -> dict[str, Any]:
    """Per agent: its resources server's ``/aggregate_metrics``, else computed the same way here."""
    from gymlab.client import post_ok
    from gymlab.resources.simple import aggregate_metrics

    by_agent: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_agent.setdefault(str((r.get("agent_ref") or {}).get("name")), []).append(r)
    out = {}
    for agent, rs in by_agent.items():
        url = metrics_urls.get(agent)
        if url:
            body = {"verify_responses": [{k: v for k, v in r.items() if k != "steps"} for r in rs]}
            try:
                out[agent] = await post_ok(url, "/aggregate_metrics", body, server="resources server")
                continue
            except ServerError as exc:
                print(f"gymlab collect: {agent}: /aggregate_metrics failed ({exc}); computing the "
                      "metrics here instead", file=sys.stderr)
        out[agent] = aggregate_metrics(rs).model_dump(mode="json")
    return out


def _progress_bar(total: int, initial: int, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit="rollout", dynamic_ncols=True)


# -- benchmark ------------------------------------------------------------------------------------

def collection_throughput(n_rows: int = 10_000, concurrency: int = 32) -> dict[str, Any]:
    """Rollouts/s of ``collect`` over ``n_rows`` rows of a trivial environment (for ``gymlab bench``).

    The resources server grades every episode 1.0, the model answers with one message, and all three
    servers run in threads of this process; the output goes to a temporary folder.
    """
    import tempfile

    from gymlab.lab import Lab
    from gymlab.protocol import BaseVerifyRequest, BaseVerifyResponse
    from gymlab.resources.simple import SimpleResourcesServer

    async def verify(self, body):
        return BaseVerifyResponse(responses_create_params=body.responses_create_params,
                                  response=body.response, reward=1.0)

    # Real annotations (not strings): FastAPI reads them to parse the body.
    verify.__annotations__ = {"body": BaseVerifyRequest, "return": BaseVerifyResponse}
    TrivialServer = type("TrivialServer", (SimpleResourcesServer,), {"verify": verify, "__module__": __name__})

    rows = [{"responses_create_params": {"input": f"task {i}"}} for i in range(n_rows)]
    with Lab() as lab, tempfile.TemporaryDirectory() as tmp:
        env = lab.serve(TrivialServer, name="trivial")
        model = lab.serve_model(lambda request: "done")
        agent = lab.serve_agent("simple_agent", resources=env, model=model)
        result = collect(rows, Path(tmp) / "bench.jsonl", agent_url=agent.url, resources_url=env.url,
                         agent_name="simple_agent", concurrency=concurrency, progress=False)
    if result.failures or len(result.rollouts) != n_rows:
        raise RuntimeError(f"collection benchmark lost rollouts: {result.failures[:1]}")
    return {"rows": n_rows, "concurrency": concurrency, "seconds": round(result.duration_s, 3),
            "rollouts/s": round(n_rows / result.duration_s, 1)}
