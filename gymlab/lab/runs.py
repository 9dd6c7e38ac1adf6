"""Runs of many episodes: ``lab.run_many(agent, rows, repeats=...)`` and the ``Rollouts`` it returns.

``Rollouts`` is a list of rollout records (``gymlab.protocol.Rollout``) that reads and writes the
rollouts JSONL of the wire reference, and offers the pandas frames of ``gymlab.lab.frames``.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gymlab.errors import ServerError
from gymlab.failures import run_failure
from gymlab.protocol import record as records
from gymlab.protocol.record import Rollout, failure_counts, mean_reward


class Rollouts(list):
    """Rollout records of one or more runs; ``.episodes``, ``.steps``, ``.calls`` are pandas frames."""

    def __init__(self, records: Iterable[Rollout | dict] = ()):
        super().__init__(r if isinstance(r, Rollout) else Rollout.model_validate(r) for r in records)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Rollouts:
        """Read a rollouts JSONL file; a bad line raises ``DatasetError`` naming the file and line."""
        from gymlab.collection.dataset import read_rollouts

        return cls(read_rollouts(path, what="a rollout record"))

    def save(self, path: str | os.PathLike) -> Path:
        """Write one record per line, atomically (a temp file in the same folder, then a rename)."""
        from gymlab.jsonl import write_jsonl_atomic

        return write_jsonl_atomic(path, self)

    def to_hf(self, format: str = "trl-sft", **options: Any):
        """A ``datasets.Dataset`` in a trainer format (``gymlab.export.to_hf``; extra ``gymlab[export]``)."""
        from gymlab.export import to_hf

        return to_hf(self, format, **options)

    @property
    def episodes(self):
        """One row per episode (``gymlab.lab.frames.episodes_frame``)."""
        from gymlab.lab.frames import episodes_frame

        return episodes_frame(self)

    @property
    def steps(self):
        """One row per step (``gymlab.lab.frames.steps_frame``)."""
        from gymlab.lab.frames import steps_frame

        return steps_frame(self)

    @property
    def calls(self):
        """One row per tool call (``gymlab.lab.frames.calls_frame``)."""
        from gymlab.lab.frames import calls_frame

        return calls_frame(self)

    def profile(self, **options: Any):
        """The reward profile per task (``gymlab.rewards.profile``): pass@k, flags, components."""
        from gymlab.rewards.profile import profile

        return profile(self, **options)

    @property
    def mean_reward(self) -> float:
        """Mean reward of the unmasked episodes (nan when there are none); failed episodes are masked."""
        return mean_reward(self)

    @property
    def failures(self) -> dict[str, int]:
        """Masked episodes by failure kind (an environment's own unlabelled mask counts as ``masked``)."""
        return failure_counts(self)

    def __add__(self, other: Iterable[Rollout]) -> Rollouts:
        return Rollouts([*self, *other])

    def __getitem__(self, index):
        item = super().__getitem__(index)
        return Rollouts(item) if isinstance(index, slice) else item

    def _repr_html_(self) -> str:
        from gymlab.lab.display import rollouts_html

        return rollouts_html(self)

    def __repr__(self) -> str:
        failures = self.failures
        masked = (
            f", {sum(failures.values())} masked ({', '.join(f'{k} {v}' for k, v in failures.items())})"
            if failures
            else ""
        )
        return f"<Rollouts {len(self)} episodes, mean reward {self.mean_reward:.3f} over the unmasked{masked}>"


def load(path: str | os.PathLike, kind: str | None = None):
    """Read a JSONL file written by gymlab or NeMo Gym; rollout files give ``Rollouts`` (with frames).

    Other kinds (sft, rl, task) come back as ``gymlab.read_jsonl`` gives them.
    """
    from gymlab.collection.dataset import read_jsonl

    rows = read_jsonl(path, kind)
    if rows and isinstance(rows[0], Rollout):
        return Rollouts(rows)
    return rows


class RunState:
    """What a running ``run_many`` has done so far: finished records in completion order, and how
    many episodes are running. An interrupted run reports from it and keeps what finished."""

    def __init__(self, total: int = 0):
        self.total = total
        self.running = 0
        self.stopped = 0  # running when the run was cancelled
        self.finished: list[Rollout] = []

    @property
    def not_started(self) -> int:
        return self.total - self.running - self.stopped - len(self.finished)

    def cancelled_line(self) -> str:
        """One line saying what an interrupt stopped and what it kept."""
        return (
            f"gymlab: run cancelled: {self.stopped} running episode(s) stopped and their sessions closed, "
            f"{self.not_started} not started; the {len(self.finished)} finished are in lab.last_run"
        )


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
) -> Rollouts:
    """Run every row ``repeats`` times through ``agent`` (an ``AgentHandle``), ``concurrency`` at a time.

    Records come back in "aabbcc" order, each with the agent's and environment's names. An episode the agent fails is recorded
    masked with a ``failure_kind`` (``on_error="raise"`` raises instead). ``state`` follows the run.
    """
    if on_error not in ("record", "raise"):
        raise ValueError(f"on_error must be 'record' or 'raise', got {on_error!r}")
    from gymlab.collection.expand import expand  # the one repeat expansion, shared with collection

    jobs = expand(list(rows), repeats)
    state = state if state is not None else RunState()
    state.total = len(jobs)
    sem = asyncio.Semaphore(max(1, concurrency))
    bar = _progress(len(jobs), agent.name) if progress else None

    async def one(row: dict[str, Any]) -> Rollout:
        async with sem:
            state.running += 1
            t0 = time.perf_counter()
            try:
                record = await agent.arun(row)
            except asyncio.CancelledError:
                state.stopped += 1
                raise
            except ServerError as exc:
                if on_error == "raise":
                    raise
                record = records.failed(row, run_failure(exc, agent.name), duration_s=time.perf_counter() - t0)
            finally:
                state.running -= 1
            if bar is not None:
                bar.update(1)
        record = records.with_identity(
            record,
            task_index=row["_ng_task_index"],
            repeat=row["_ng_rollout_index"],
            agent=agent.name,
            env=env_name or agent.name,
        )
        state.finished.append(record)
        return record

    tasks = [asyncio.ensure_future(one(r)) for r in jobs]
    try:
        return Rollouts(await asyncio.gather(*tasks))
    except BaseException:
        # gather gives up at the first cancelled or failed episode; the others must stop too, and
        # each must finish its own cleanup (its session closed) before the run reports.
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
        raise
    finally:
        if bar is not None:
            bar.close()


def _progress(total: int, name: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=name, unit="episode")


def env_name_of(lab: Any, agent: Any) -> str | None:
    """The name of the resources server an agent handle is bound to, when this lab serves it."""
    url = getattr(agent.server, "resources_server", None)
    return next((h.name for h in lab.servers.values() if h.url == url), None)
