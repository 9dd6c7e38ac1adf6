"""Runs of many episodes: ``lab.run_many(agent, rows, repeats=...)`` and the ``Rollouts`` it returns."""

from __future__ import annotations

import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from gymlab._traces import logbook
from gymlab.collection.config_rows import iter_expand
from gymlab.collection.readers import kind_of, read_jsonl
from gymlab.jsonl import iter_jsonl, write_atomic
from gymlab.lab.display import rollouts_html
from gymlab.lab.store import RecordStore, StoreBuilder
from gymlab.protocol.record import Rollout, failure_counts, mean_reward, mean_reward_text
from gymlab.run.engine import Job, Policy, RunState, run_jobs
from gymlab.run.pool import AgentReplica, ReplicaPool
from gymlab.run.sinks import MemorySink


class Rollouts(Sequence):
    """Rollout records of one or more runs; ``.episodes``, ``.steps``, ``.calls`` are pandas frames, built
    from the records' JSON (a ``RecordStore``, about the JSONL file's size). A record is validated when
    indexed or iterated (a bad line raises ``DatasetError`` naming the file and line then)."""

    def __init__(
        self,
        records: Iterable[Rollout | dict] = (),
        *,
        store: RecordStore | None = None,
        completed: list[int] | None = None,
    ):
        if store is None:
            if isinstance(records, Rollouts):
                store, completed = records.store, records.completed if completed is None else completed
            else:
                store = RecordStore.from_records(records)
        self.store = store
        #: Each record's rank in the order the episodes finished (runs of ``run_many``), else None.
        self.completed = completed if completed is not None and len(completed) == len(store) else None
        #: The rewards an episode can earn, as its environment declares them (``BaseServer.reward_range``).
        self.reward_range: tuple[float, float] | None = None
        self._summary: list[tuple[float, bool, str | None, int]] | None = None

    @classmethod
    def load(cls, path: str | os.PathLike) -> Rollouts:
        """A rollouts JSONL file, read without parsing its records (a torn last line raises at once;
        a bad line raises ``DatasetError`` naming the file and line when it is used)."""
        return cls(store=RecordStore.from_file(path))

    def save(self, path: str | os.PathLike) -> Path:
        """Write one record per line, atomically (a temp file in the same folder, then a rename)."""
        return write_atomic(path, self.store.buffer)

    def to_hf(self, format: str = "trl-sft", **options: Any):
        """A ``datasets.Dataset`` in a trainer format (``gymlab.export.to_hf``; extra ``gymlab[export]``)."""
        from gymlab.export import to_hf

        return to_hf(self, format, **options)

    @property
    def episodes(self):
        """One row per episode, the concise columns (``episodes_frame(full=True)`` for all of them)."""
        return self.episodes_frame()

    @property
    def steps(self):
        """One row per step, the concise columns (``steps_frame(full=True)`` for all of them)."""
        return self.steps_frame()

    @property
    def calls(self):
        """One row per tool call (``gymlab.lab.frames.calls_frame``)."""
        from gymlab.lab.frames import calls_frame

        return calls_frame(self.store)

    def episodes_frame(self, *, full: bool = False):
        """One row per episode (``gymlab.lab.frames.episodes_frame``); ``full=True``: every column."""
        from gymlab.lab.frames import episodes_frame

        frame = episodes_frame(self.store, full=full)
        if self.completed is not None:  # a run's own order of finishing (reward_curve plots over it)
            frame["completed"] = self.completed
        return self._ranged(frame)

    def steps_frame(self, *, full: bool = False):
        """One row per step (``gymlab.lab.frames.steps_frame``); ``full=True``: every column."""
        from gymlab.lab.frames import steps_frame

        return self._ranged(steps_frame(self.store, full=full))

    def _ranged(self, frame):
        """``frame`` carrying the environment's declared reward range (``attrs``), which the plots read."""
        if self.reward_range is not None:
            frame.attrs["reward_range"] = tuple(self.reward_range)
        return frame

    def _summaries(self) -> list[tuple[float, bool, str | None, int]]:
        """(reward, mask_sample, failure_kind, steps) of every record, parsed once."""
        if self._summary is None:
            self._summary = summaries(self.store)
        return self._summary

    @property
    def n_steps(self) -> int:
        """Steps over all episodes."""
        return sum(s[3] for s in self._summaries())

    def profile(self, **options: Any):
        """The reward profile per task (``gymlab.rewards.profile``): pass@k, flags, components."""
        from gymlab.rewards.profile import profile

        return profile(self, **options)

    @property
    def mean_reward(self) -> float:
        """Mean reward of the unmasked episodes (nan when there are none); failed episodes are masked."""
        return mean_reward({"reward": s[0], "mask_sample": s[1]} for s in self._summaries())

    @property
    def failures(self) -> dict[str, int]:
        """Masked episodes by failure kind (an environment's own unlabelled mask counts as ``masked``)."""
        return failure_counts({"mask_sample": s[1], "failure_kind": s[2]} for s in self._summaries())

    def __len__(self) -> int:
        return len(self.store)

    def __getitem__(self, index):
        if isinstance(index, slice):
            completed = self.completed[index] if self.completed is not None else None
            return Rollouts(store=self.store.take(range(len(self))[index]), completed=completed)
        n = len(self)
        if not -n <= index < n:
            raise IndexError(f"episode {index} of {n} (Rollouts holds {n} records)")
        return self.store.record(index % n)

    def __add__(self, other: Iterable[Rollout]) -> Rollouts:
        other_store = other.store if isinstance(other, Rollouts) else RecordStore.from_records(other)
        return Rollouts(store=RecordStore.concat([self.store, other_store]))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Rollouts):
            return self.store.lines() == other.store.lines() or list(self) == list(other)
        return isinstance(other, list) and list(self) == other

    __hash__ = None  # mutable-looking sequence, like a list

    def _repr_html_(self) -> str:
        return rollouts_html(self)

    def __repr__(self) -> str:
        failures = self.failures
        kinds = ", ".join(f"{k} {v}" for k, v in failures.items())
        masked = f", {sum(failures.values())} masked ({kinds})" if failures else ""
        return f"<Rollouts {len(self)} episodes, {mean_reward_text(self.mean_reward)}{masked}>"


def failure_line(run: Rollouts, *, logged: bool = False) -> str | None:
    """One line for a run's failures (None without any): how many by kind and the most common cause; it points
    to ``lab.logs()`` only when ``logged`` (servers logged errors: a model's refusal or a timeout logs none)."""
    if not (failed := run.failures):
        return None
    causes = Counter(
        " ".join(str(r["failure_reason"]).split())[:300]
        for r in run.store.dicts()
        if r.get("mask_sample") and r.get("failure_reason")
    )
    kinds = ", ".join(f"{kind} {n}" for kind, n in failed.items())
    common = "".join(f"; the most common cause ({n}): {cause}" for cause, n in causes.most_common(1))
    return f"gymlab: {sum(failed.values())} of {len(run)} episodes failed ({kinds}){common}; they are masked" + (
        ", and lab.logs() has the server-side traces" if logged else ""
    )


def summaries(store: RecordStore) -> list[tuple[float, bool, str | None, int]]:
    """(reward, mask_sample, failure_kind, steps) of every record, parsed (not validated) by orjson."""
    return [
        (float(r.get("reward") or 0.0), bool(r.get("mask_sample")), r.get("failure_kind"), len(r.get("steps") or ()))
        for r in store.dicts()
    ]


def load(path: str | os.PathLike, kind: str | None = None):
    """Read a JSONL file written by gymlab or NeMo Gym: ``Rollouts`` (with frames) for a rollout file,
    other kinds (sft, rl, task) as ``gymlab.read_jsonl`` gives them."""
    if kind is None:
        first = next(iter_jsonl(path), None)
        kind = kind_of(first[1]) if first is not None else None
    if kind == "rollout":
        return Rollouts.load(path)  # lazy: validated when used
    return read_jsonl(path, kind)


async def arun_many(
    agent: Any,
    rows: list[dict[str, Any]],
    *,
    repeats: int = 1,
    concurrency: int = 16,
    env_name: str | None = None,
    on_error: str = "record",
    progress: bool = False,
    state: RunState | None = None,
    max_retries: int = 0,
    observe: Callable[[Rollout], None] | None = None,
) -> Rollouts:
    """Every row ``repeats`` times through ``agent`` on the run engine, ``concurrency`` at a time, in "aabbcc"
    order; a failure whose kind may pass is retried ``max_retries`` times, then masked (``on_error="raise"``:
    raised). ``state`` follows the run; ``observe(record)`` sees each record as it finishes (a live panel).
    The servers' error logs stay out of the cell; the end prints one ``failure_line``."""
    if on_error not in ("record", "raise"):
        raise ValueError(f"on_error must be 'record' or 'raise', got {on_error!r}")
    rows = list(rows)
    total = sum(1 for _ in iter_expand(rows, repeats))  # every job checked before the first runs
    name = str(agent.name)
    replicas = agent.replicas if callable(getattr(agent, "replicas", None)) else None
    pool = replicas() if replicas is not None else ReplicaPool([AgentReplica(agent)], reprobe_s=None)
    # a pool of cells: the driver keeps each rollout's budget itself (a frozen cell costs a timeout)
    budget = agent.rollout_budget() if callable(getattr(agent, "rollout_budget", None)) else None
    state = state if state is not None else RunState()
    state.total = total
    if progress:
        from tqdm.auto import tqdm

    bar = tqdm(total=total, desc=name, unit="episode") if progress else None
    held = StoreBuilder(total)
    sink = MemorySink(held, name, env_name, raise_errors=on_error == "raise", state=state, bar=bar, observe=observe)
    jobs = (Job(i, row, pool, name) for i, row in enumerate(iter_expand(rows, repeats)))
    policy, book, since = Policy(max_retries, timeout_s=budget), logbook(), time.time()
    try:
        with book.quiet():
            await run_jobs(jobs, sink, concurrency=concurrency, policy=policy, state=state)
        run = Rollouts(store=held.finish(), completed=sink.completed())
    finally:
        if bar is not None:
            bar.close()
    if line := failure_line(run, logged=any(e.time >= since for e in list(book.entries))):
        print(line, file=sys.stderr, flush=True)
    return run
