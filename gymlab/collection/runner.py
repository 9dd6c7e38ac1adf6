"""Rollout collection: dataset rows in, rollout records out in resumable JSONL files (docs/collection.md)."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import sys
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

import orjson

from gymlab._http.retry import RETRY_SPAN_S
from gymlab._sync import run_sync
from gymlab.collection.config_rows import config_rows, iter_expand, read_rows
from gymlab.collection.files import in_shard, output_paths, record_shard, rewrite_sorted
from gymlab.collection.serving import Target, config_of, config_route, served
from gymlab.errors import ConfigError, DatasetError, ServerError
from gymlab.jsonl import atomic_file, dumps, iter_appendable, loads, read_appendable, write_atomic
from gymlab.protocol.record import mean_reward_text
from gymlab.run.engine import STOP_AFTER, Job, Policy, run_jobs
from gymlab.run.pool import HttpReplica, ReplicaPool, agent_pool
from gymlab.run.sinks import JsonlSink, Key, Tally, key_of

if TYPE_CHECKING:
    from gymlab._http.client import Client


P = ParamSpec("P")
T = TypeVar("T")

#: Seconds one ``POST /run`` may take by default: longer than an agent's own episode budget
#: (``timeouts.episode``, 1800 s), so the agent's typed failure arrives first.
DEFAULT_ROLLOUT_TIMEOUT_S = 2000.0


@dataclass
class CollectResult:
    """What a collection produced; ``rollouts`` and ``failures`` are read from its files when asked."""

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
        return read_appendable(self.paths["rollouts"], repair=False)

    @property
    def failures(self) -> list[dict[str, Any]]:
        return read_appendable(self.paths["failures"], repair=False, what="failures")

    def __repr__(self) -> str:
        return (
            f"<CollectResult {self.output}: {self.n_rollouts} rollouts ({self.n_new} new, "
            f"{self.n_skipped} already done), {self.n_failures} failed, {mean_reward_text(self.mean_reward)}>"
        )


async def acollect(
    source: Any,
    output: str | os.PathLike,
    *,
    input: str | os.PathLike | Iterable[dict[str, Any]] | None = None,
    dataset: str | None = None,
    split: str | None = None,
    agent: str | None = None,
    agent_url: str | Sequence[str] | ReplicaPool | None = None,
    route: Callable[[dict[str, Any]], Target] | None = None,
    resources_url: str | None = None,
    pool: Any = None,
    client: Client | None = None,
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
) -> CollectResult:
    """Collect the rollouts of ``source`` (rows or a JSONL path for ``agent_url``/``route``, or a config)
    into ``output``, resumably; sources, retries, ``stop_after``, ``shard`` and ``client``: docs/collection.md."""
    t0, config = time.perf_counter(), config_of(source)
    rows: Any = (
        source if config is None else input if input is not None else config_rows(config, dataset=dataset, split=split)
    )
    if rows is None or (config is None and agent_url is None and route is None):
        raise ConfigError("give rows and agent_url= (an agent server) or route= (row -> Target), or a config")
    if agent_url is not None and route is not None:
        raise ConfigError("give one of agent_url= (one agent server) or route= (row -> Target)")
    rows = read_rows(rows, flat="auto")[:limit]
    from gymlab._http.client import Client  # the server stack, imported only when a collection runs

    own = client is None  # then its connections are made on first use and closed with the run
    client = client or Client()
    if agent_url is not None:
        replicas = agent_pool(agent_url, server=agent, client=client)
        default_ref = {"type": "responses_api_agents", "name": agent or replicas.name}

        def route(row: dict[str, Any]) -> Target:
            ref = {"type": "responses_api_agents", "name": agent} if agent else row.get("agent_ref")
            return Target(replicas.name, ref or default_ref, resources_url, replicas)

    async with contextlib.AsyncExitStack() as stack:
        if own:  # no connection pool outlives a caller's short-lived loop
            await stack.enter_async_context(client)
        if route is None:
            assert config is not None  # a source without agent_url or route is a config (checked above)
            if pool is None:
                urls, here = await stack.enter_async_context(served(config, client))
                route = config_route(config, urls, agent, metrics_here=here)
            else:
                route = config_route(config, pool.urls(client.registry), agent, pool.replicas)

        def jobs() -> Iterator[tuple[dict[str, Any], Target]]:
            """The jobs, made as they are read (twice: once to check and record them, once to run them)."""
            expanded = iter_expand(
                rows,
                repeats,
                responses_create_params=responses_create_params,
                num_repeats_add_seed=num_repeats_add_seed,
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
        pools: dict[str, tuple[ReplicaPool, str]] = {}  # url -> its replicas, the server's name for errors
        metrics_urls: dict[str, str | None] = {}
        total = n_skipped = 0
        for job, t in _recorded_inputs(paths["materialized_inputs"], jobs(), done):
            total += 1
            n_skipped += key_of(job) in done
            if t.url not in pools:
                server = str(t.agent_ref.get("name") or t.url)
                pools[t.url] = (t.replicas or ReplicaPool([HttpReplica(t.url, server=server, client=client)]), server)
            metrics_urls.setdefault(str(t.agent_ref.get("name")), t.metrics_url)
        pending = (Job(i, job, *pools[t.url], t) for i, (job, t) in enumerate(jobs()) if key_of(job) not in done)
        failed_before = (key_of(f) for _, _, _, f in iter_appendable(paths["failures"], what="failures"))
        sink = JsonlSink(paths, failed_before, (total, n_skipped) if progress else None)
        try:
            await run_jobs(
                pending,
                sink,
                concurrency=max(1, min(concurrency, total - n_skipped)),
                policy=Policy(max_retries, backoff_s, timeout_s, stop_after, retry_span_s),
            )
        finally:
            for p, _ in pools.values():
                await p.aclose()
            sink.close()

        n_rollouts = rewrite_sorted(paths["rollouts"])
        n_failures = rewrite_sorted(
            paths["failures"], keep=lambda k: k not in done and k not in sink.recovered, what="failures"
        )
        tally = Tally()

        def records() -> Iterator[dict[str, Any]]:
            for _, _, _, record in iter_appendable(paths["rollouts"], repair=False):
                tally.add(record)
                yield record

        metrics = await aggregate(records(), metrics_urls, client)
    write_atomic(paths["aggregate_metrics"], json.dumps(metrics, indent=2, default=str))
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


def sync_form(fn: Callable[P, Coroutine[Any, Any, T]]) -> Callable[P, T]:
    """``fn`` with the same parameters, from sync code (a script, a kernel cell, the CLI); Ctrl-C stops it
    with every finished rollout kept (``gymlab._sync.run_sync``), and the same call resumes it."""

    @functools.wraps(fn)
    def sync(*args: P.args, **kwargs: P.kwargs) -> T:
        return run_sync(fn(*args, **kwargs))

    sync.__name__ = sync.__qualname__ = fn.__name__[1:]
    sync.__doc__ = f"``{fn.__name__}`` from sync code; Ctrl-C keeps every finished rollout.\n\n{fn.__doc__}"
    return sync


collect = sync_form(acollect)


def _checked_done(path: Path) -> set[Key]:
    """The (task, repeat) keys already in the rollouts file; a key written twice is an error."""
    seen: dict[Key, int] = {}
    for i, (_, _, _, record) in enumerate(iter_appendable(path)):
        if (first := seen.setdefault(k := key_of(record), i)) != i:
            raise DatasetError(
                str(path),
                None,
                f"records {first + 1} and {i + 1} are both (task {k[0]}, repeat {k[1]}); remove one, then rerun",
            )
    return set(seen)


def _recorded_inputs(path: Path, jobs: Iterator[tuple[dict[str, Any], Any]], done: set[Key]) -> Iterator[Any]:
    """``jobs``, passed on while written to the inputs file (its other keys kept); resuming onto rollouts
    of different inputs is refused before anything runs."""
    old = {key_of(r): (offset, len(line)) for _, offset, line, r in iter_appendable(path, what="materialized inputs")}
    with atomic_file(path) as out:
        with open(path, "rb") if old else open(os.devnull, "rb") as source:
            for job, target in jobs:
                k = key_of(job)
                if (place := old.pop(k, None)) is not None and k in done:
                    source.seek(place[0])
                    if loads(source.read(place[1])) != job:
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


#: Record keys left out of the ``/aggregate_metrics`` request: the bulky ones, and ``agent_ref`` (one agent a request).
LEFT_OUT = frozenset({"steps", "response", "responses_create_params", "agent_ref"})


async def aggregate(
    records: Iterable[dict[str, Any]], metrics_urls: dict[str, str | None], client: Client
) -> dict[str, Any]:
    """Per agent: its resources server's ``/aggregate_metrics`` (the body built as JSON bytes while
    ``records`` stream past, never held as objects), else computed the same way here."""
    from gymlab.resources.simple import MetricsTally

    bodies: dict[str, bytearray] = {}
    tallies: dict[str, MetricsTally] = {}
    for r in records:
        agent = str((r.get("agent_ref") or {}).get("name"))
        if not metrics_urls.get(agent):
            tallies.setdefault(agent, MetricsTally()).add(r)
            continue
        body = bodies.setdefault(agent, bytearray(b"["))
        if len(body) > 1:
            body += b","
        body += dumps({k: v for k, v in r.items() if k not in LEFT_OUT})
    out = {agent: tally.result().model_dump(mode="json") for agent, tally in tallies.items()}
    for agent, body in bodies.items():
        body += b"]"
        payload = {"verify_responses": orjson.Fragment(bytes(body))}
        try:
            out[agent] = await client.post_ok(
                str(metrics_urls[agent]), "/aggregate_metrics", payload, server="resources server"
            )
            continue
        except ServerError as exc:
            print(
                f"gymlab collect: {agent}: /aggregate_metrics failed ({exc}); computing the metrics here instead",
                file=sys.stderr,
            )
        tally = MetricsTally()
        for r in loads(bytes(body)):
            tally.add(r)
        out[agent] = tally.result().model_dump(mode="json")
    return out
