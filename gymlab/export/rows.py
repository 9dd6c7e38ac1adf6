"""Which records an export keeps (the filters and the preference pairing rule), and rollout records out to
JSONL atomically: rollout rows, chat-format SFT rows and RL rows (docs/export.md)."""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gymlab.jsonl import write_jsonl_atomic
from gymlab.models.chat_convert import chat_messages, chat_tools, prompt_items
from gymlab.protocol import Rollout
from gymlab.protocol.responses import TOKEN_FIELDS


def as_records(rollouts: Iterable[Rollout | dict] | str | os.PathLike) -> list[Rollout]:
    """Rollout records from records, dicts or a rollouts JSONL path."""
    if isinstance(rollouts, (str, os.PathLike)):
        from gymlab.collection.readers import read_jsonl

        return read_jsonl(rollouts, "rollout")
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
        r for r in records if not (drop_masked and r.mask_sample) and (min_reward is None or r.reward >= min_reward)
    ]
    if best_of_n is not None:
        if best_of_n < 1:
            raise ValueError(f"best_of_n must be at least 1, got {best_of_n}")
        groups: dict[Any, list[int]] = defaultdict(list)
        for i, r in enumerate(keep):
            groups[group_key(r)].append(i)
        chosen = {i for group in groups.values() for i in sorted(group, key=lambda i: -keep[i].reward)[:best_of_n]}
        keep = [r for i, r in enumerate(keep) if i in chosen]
    return keep


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
        best, worst = max(group, key=lambda r: r.reward), min(group, key=lambda r: r.reward)  # the earlier of ties
        margin = best.reward - worst.reward
        if margin <= 0:
            out.ties += 1
        elif margin < min_margin:
            out.below_margin += 1
        else:
            out.pairs.append((best, worst))
    return out


#: The keys of a NeMo Gym rollout row, in the order it writes them.
ROLLOUT_KEYS = (
    "responses_create_params",
    "response",
    "reward",
    "mask_sample",
    "failure_kind",
    "failure_reason",
    "_ng_task_index",
    "_ng_rollout_index",
    "agent_ref",
)
#: Fields gymlab adds to a record: left out of a row when None (NeMo Gym's own are written null).
_GYMLAB_FIELDS = tuple(k for k in Rollout.model_fields if k not in ROLLOUT_KEYS)


def rollout_row(record: Rollout, gymlab_fields: bool = True) -> dict[str, Any]:
    """A record as a rollout row: NeMo Gym's keys first; ``gymlab_fields=False``: NeMo Gym's row alone
    (no steps, timings or server names; an ``agent_ref`` from the agent's name when it has none)."""
    data = record.model_dump(mode="json")
    for key in _GYMLAB_FIELDS:  # gymlab's own fields only when set (a row's own null stays)
        if data.get(key, 0) is None:
            del data[key]
    row = {k: data.pop(k) for k in ROLLOUT_KEYS if k in data}
    if not gymlab_fields:
        if "agent_ref" not in row and data.get("agent_name"):
            row["agent_ref"] = {"type": "responses_api_agents", "name": data["agent_name"]}
        for key in ("steps", "duration_s", "env_name", "agent_name"):
            data.pop(key, None)
    row.update(data)
    return row


def export_rollouts(
    rollouts: Iterable[Rollout | dict], path: str | os.PathLike, *, gymlab_fields: bool = True, **filters: Any
) -> Path:
    """Write rollout rows to ``path`` atomically (filters as in ``select``; none by default)."""
    return write_jsonl_atomic(path, (rollout_row(r, gymlab_fields) for r in select(rollouts, **filters)))


def sft_row(record: Rollout, where: str = "") -> dict[str, Any]:
    """One episode as a chat-format SFT row: ``{"messages": [...], "tools": [...]}``."""
    params = record.responses_create_params
    messages = chat_messages([*prompt_items(params), *record.response.output], where)
    return {"messages": messages, "tools": chat_tools(params.tools)}


def with_tokens(row: dict[str, Any], record: Rollout) -> dict[str, Any]:
    """``row`` with ``token_turns``, each model turn's ``TOKEN_FIELDS``, when the model server kept them."""
    turns = []
    for item in record.response.output:
        extra = item.__pydantic_extra__ or {}
        if extra.get("generation_token_ids") is not None:
            turns.append({key: extra.get(key) for key in TOKEN_FIELDS})
    if turns:
        row["token_turns"] = turns
    return row


def rl_row(record: Rollout, where: str = "") -> dict[str, Any]:
    """One episode as an RL row: prompt, completion, reward, ids (and ``token_turns`` when kept)."""
    params = record.responses_create_params
    row = {
        "prompt": chat_messages(prompt_items(params), where),
        "completion": chat_messages(record.response.output, where),
        "tools": chat_tools(params.tools),
        "reward": record.reward,
        "_ng_task_index": record.task_index,
        "_ng_rollout_index": record.repeat,
    }
    return with_tokens(row, record)


def export_sft(rollouts: Iterable[Rollout | dict], path: str | os.PathLike, **filters: Any) -> Path:
    """Write chat-format SFT rows atomically (filters as in ``select``; masked dropped unless ``drop_masked=False``)."""
    return _export(sft_row, rollouts, path, **filters)


def export_rl(rollouts: Iterable[Rollout | dict], path: str | os.PathLike, **filters: Any) -> Path:
    """Write RL rows (prompt, completion, reward) atomically; filters as in ``export_sft``."""
    return _export(rl_row, rollouts, path, **filters)


def _export(
    build: Callable[[Rollout, str], dict], rollouts: Any, path: Any, *, drop_masked: bool = True, **filters: Any
) -> Path:
    records = select(rollouts, drop_masked=drop_masked, **filters)
    return write_jsonl_atomic(path, [build(r, f"episode {i}") for i, r in enumerate(records)])
