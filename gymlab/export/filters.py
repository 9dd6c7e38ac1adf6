"""Which records an export keeps: the filters (reward, masked, best-of-n) and the preference pairing rule."""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gymlab.protocol import Rollout


def as_records(rollouts: Iterable[Rollout | dict] | str | os.PathLike) -> list[Rollout]:
    """Rollout records from records, dicts or a rollouts JSONL path."""
    if isinstance(rollouts, (str, os.PathLike)):
        from gymlab.collection.readers import read_rollouts

        return read_rollouts(rollouts)
    return [r if isinstance(r, Rollout) else Rollout.model_validate(r) for r in rollouts]


def group_key(record: Rollout) -> Any:
    """What identifies a record's task: its environment and ``_ng_task_index`` when it has one, else
    the request itself (so runs of several environments, each counting tasks from 0, stay apart)."""
    if record.task_index is not None:
        return (record.env, record.task_index)
    return record.responses_create_params.model_dump_json(exclude_none=True)


def by_task(records: Iterable[Rollout]) -> dict[Any, list[Rollout]]:
    """Records grouped by task (``group_key``), tasks and records in their first-seen order."""
    groups: dict[Any, list[Rollout]] = defaultdict(list)
    for r in records:
        groups[group_key(r)].append(r)
    return dict(groups)


def select(
    rollouts: Iterable[Rollout | dict],
    *,
    min_reward: float | None = None,
    drop_masked: bool = False,
    best_of_n: int | None = None,
) -> list[Rollout]:
    """The records that pass every filter given, in their original order: reward at or above ``min_reward``,
    not masked (``drop_masked``), among the ``best_of_n`` of their task (ties keep the earlier)."""
    records = as_records(rollouts)
    keep = [
        (i, r)
        for i, r in enumerate(records)
        if not (drop_masked and r.mask_sample) and (min_reward is None or r.reward >= min_reward)
    ]
    if best_of_n is not None:
        if best_of_n < 1:
            raise ValueError(f"best_of_n must be at least 1, got {best_of_n}")
        groups: dict[Any, list[tuple[int, Rollout]]] = defaultdict(list)
        for i, r in keep:
            groups[group_key(r)].append((i, r))
        chosen = {
            i for group in groups.values() for i, _ in sorted(group, key=lambda ir: (-ir[1].reward, ir[0]))[:best_of_n]
        }
        keep = [(i, r) for i, r in keep if i in chosen]
    return [r for _, r in keep]


@dataclass
class Pairing:
    """Preference pairs of one export and what the rule left out, counted by reason."""

    pairs: list[tuple[Rollout, Rollout]] = field(default_factory=list)  # (chosen, rejected)
    single: int = 0  # tasks with one unmasked episode: nothing to compare
    ties: int = 0  # best and worst rewards equal
    below_margin: int = 0  # best - worst under min_margin


def preference_pairs(records: Iterable[Rollout], *, min_margin: float = 0.0) -> Pairing:
    """One (chosen, rejected) pair per task: its best unmasked episode against its worst, the earlier of equal
    rewards (a pair is the same on every run); ties and margins under ``min_margin`` dropped, counted."""
    if min_margin < 0:
        raise ValueError(f"min_margin must be 0 or more, got {min_margin}")
    out = Pairing()
    for group in by_task(r for r in records if not r.mask_sample).values():
        if len(group) < 2:
            out.single += 1
            continue
        best = group[min(range(len(group)), key=lambda i: (-group[i].reward, i))]
        worst = group[min(range(len(group)), key=lambda i: (group[i].reward, i))]
        margin = best.reward - worst.reward
        if margin <= 0:
            out.ties += 1
        elif margin < min_margin:
            out.below_margin += 1
        else:
            out.pairs.append((best, worst))
    return out
