"""NeMo Gym's reward-profiler files, from gymlab records: the same fields and figures.

``ng_reward_profile`` (NeMo Gym 0.7.0) writes, beside a rollouts file:

- ``<stem>_reward_profiling.jsonl``: per task, ``mean/``, ``max/``, ``min/``, ``median/``, ``std/``
  (sample std; 0 for one rollout) of the reward and the numeric usage counts, ``sample`` (the input
  row), ``num_rollouts``, ``expected_num_rollouts``, ``missing_num_rollouts``,
  ``reward_profile_completion_pct`` and ``rollout_infos``;
- ``<stem>_agent_metrics.json``: per agent, the same five statistics over all its rollouts plus,
  with several repeats, ``{mean,median,std,min,max,se,ci_low_95,ci_high_95}_across_repeats/mean/<field>``;
- ``<stem>_repeat_level_metrics.json``: per agent and repeat index, ``sample_count``,
  ``missing_count`` and ``mean/median/std/sem/min/max/p25/p75`` of each field over the tasks.

gymlab's one difference: a masked record (an infrastructure failure, or the environment's own mask)
is not a completed rollout, so it enters no figure and counts as missing.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gymlab.protocol.record import RESULT_KEYS
from gymlab.rewards.stats import quantile, sample_std, t_interval_95

_STATS = ("mean", "max", "min", "median", "std")
_TASK, _REPEAT = "_ng_task_index", "_ng_rollout_index"


def _order(index: Any) -> tuple:
    """A sort key for task and repeat indices that may be missing (None sorts last)."""
    return (index is None, index if isinstance(index, (int, float)) else str(index))


def _numbers(record: Any) -> dict[str, float]:
    """The reward and the numeric usage counts of a record (NeMo's profiled fields)."""
    out = {"reward": float(record.reward)}
    usage = record.response.usage
    if usage is not None:
        for key, value in usage.model_dump(mode="json").items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                out[key] = value
    return out


def _describe(rows: list[dict[str, float]], columns: list[str]) -> dict[str, float]:
    out: dict[str, float] = {}
    values = {c: [float(r[c]) for r in rows if c in r] for c in columns}
    for stat in _STATS:
        for c in columns:
            v = values[c]
            if not v:
                continue
            out[f"{stat}/{c}"] = {
                "mean": lambda x: math.fsum(x) / len(x),
                "max": max,
                "min": min,
                "median": statistics.median,
                "std": sample_std,
            }[stat](v)
    return out


def _columns(rows: Iterable[dict[str, float]]) -> list[str]:
    seen: dict[str, None] = {}
    for r in rows:
        seen.update(dict.fromkeys(r))
    return list(seen)


def _sample(record: Any) -> dict[str, Any]:
    """The input row of a record, when no materialized inputs are given: its row fields."""
    data = record.model_dump(mode="json", exclude_none=True)
    return {k: v for k, v in data.items() if k not in RESULT_KEYS and k not in (_TASK, _REPEAT, "_ng_result_type")}


def nemo_profile(records: Iterable[Any], inputs: Iterable[dict] | None = None) -> tuple[list, list, list]:
    """(per-task rows, per-agent metrics, per-repeat metrics) as NeMo Gym's profiler computes them.

    ``inputs`` (the materialized input rows) give each task's ``sample`` and expected rollouts;
    without them the records' own row fields and counts stand in.
    """
    records = sorted(records, key=lambda r: (_order(r.task_index), _order(r.repeat)))
    rows = list(inputs) if inputs is not None else None
    expected = Counter(r[_TASK] for r in rows) if rows is not None else Counter(r.task_index for r in records)
    samples: dict[Any, dict] = {}
    if rows is not None:
        for row in rows:
            samples.setdefault(row[_TASK], {k: v for k, v in row.items() if k not in (_TASK, _REPEAT)})
    done = [r for r in records if not r.mask_sample]
    numbers = [_numbers(r) for r in done]
    columns = _columns(numbers)

    by_task: dict[Any, list[int]] = defaultdict(list)
    for i, r in enumerate(done):
        by_task[r.task_index].append(i)
    groups = []
    for task, idx in sorted(by_task.items(), key=lambda kv: _order(kv[0])):
        n = len(idx)
        infos = [
            {"rollout_id": f"{task}:{done[i].repeat}", _TASK: task, _REPEAT: done[i].repeat, **numbers[i]}
            for i in sorted(idx, key=lambda i: _order(done[i].repeat))
        ]
        groups.append(
            {
                _TASK: task,
                **_describe([numbers[i] for i in idx], columns),
                "sample": samples.get(task) or _sample(done[idx[0]]),
                "num_rollouts": n,
                "expected_num_rollouts": expected[task],
                "missing_num_rollouts": expected[task] - n,
                "reward_profile_completion_pct": 100.0 if not expected[task] else 100.0 * n / expected[task],
                "rollout_infos": infos,
            }
        )

    agents: dict[str, list[int]] = defaultdict(list)
    for i, r in enumerate(done):
        agents[_agent_name(r, samples)].append(i)
    agent_rows, repeat_rows = [], []
    for name, idx in sorted(agents.items()):
        entry = {**_describe([numbers[i] for i in idx], columns), "agent_ref": {"name": name}}
        repeats = _repeat_level(name, [(done[i], numbers[i]) for i in idx])
        repeat_rows += repeats
        entry.update(_across_repeats(repeats))
        agent_rows.append(entry)
    return groups, agent_rows, repeat_rows


def _agent_name(record: Any, samples: dict[Any, dict]) -> str:
    ref = (samples.get(record.task_index) or {}).get("agent_ref")
    return (ref or {}).get("name") or record.agent or "agent"


def _repeat_level(agent: str, pairs: list[tuple[Any, dict[str, float]]]) -> list[dict[str, Any]]:
    """Per repeat index, the spread of each field over the tasks (only for several repeats)."""
    by_repeat: dict[Any, list[tuple[Any, dict[str, float]]]] = defaultdict(list)
    for record, nums in pairs:
        by_repeat[record.repeat].append((record, nums))
    if len(by_repeat) < 2:
        return []
    tasks = len({r.task_index for r, _ in pairs})
    columns = sorted(_columns(n for _, n in pairs))
    out = []
    for repeat, group in sorted(by_repeat.items(), key=lambda kv: _order(kv[0])):
        present = len({r.task_index for r, _ in group})
        entry: dict[str, Any] = {
            "agent_ref": {"name": agent},
            _REPEAT: repeat,
            "sample_count": present,
            "missing_count": tasks - present,
        }
        for col in columns:
            v = [float(n[col]) for _, n in group if col in n]
            if not v:
                continue
            mean, std = math.fsum(v) / len(v), sample_std(v)
            sem = std / math.sqrt(len(v))
            entry.update(
                {
                    f"mean/{col}": mean,
                    f"median/{col}": statistics.median(v),
                    f"std/{col}": std,
                    f"sem/{col}": sem,
                    f"min/{col}": min(v),
                    f"max/{col}": max(v),
                    f"p25/{col}": quantile(v, 0.25),
                    f"p75/{col}": quantile(v, 0.75),
                }
            )
            if len(v) > 1:
                entry[f"ci_low_95/{col}"], entry[f"ci_high_95/{col}"] = t_interval_95(mean, sem, len(v))
        out.append(entry)
    return out


def _across_repeats(repeats: list[dict[str, Any]]) -> dict[str, float]:
    """Each per-repeat ``mean/<field>`` summarized over the repeats (mean, spread, 95 % interval)."""
    out: dict[str, float] = {}
    keys = sorted({k for r in repeats for k in r if k.startswith("mean/")})
    for key in keys:
        v = [float(r[key]) for r in repeats if key in r]
        mean, std = math.fsum(v) / len(v), sample_std(v)
        se = std / math.sqrt(len(v))
        low, high = t_interval_95(mean, se, len(v))
        out.update(
            {
                f"mean_across_repeats/{key}": mean,
                f"median_across_repeats/{key}": statistics.median(v),
                f"std_across_repeats/{key}": std,
                f"min_across_repeats/{key}": min(v),
                f"max_across_repeats/{key}": max(v),
                f"se_across_repeats/{key}": se,
                f"ci_low_95_across_repeats/{key}": low,
                f"ci_high_95_across_repeats/{key}": high,
            }
        )
    return out


def profile_paths(path: str | os.PathLike) -> tuple[Path, Path, Path]:
    """Where NeMo Gym puts the three files for rollouts file ``path``."""
    base = Path(path)
    return (
        base.with_name(base.stem + "_reward_profiling.jsonl"),
        base.with_name(base.stem + "_agent_metrics.json"),
        base.with_name(base.stem + "_repeat_level_metrics.json"),
    )


def write_nemo_profile(
    records: Iterable[Any], path: str | os.PathLike, inputs: Iterable[dict] | None = None
) -> tuple[Path, Path, Path]:
    """Write NeMo Gym's three profiler files beside rollouts file ``path``; returns their paths."""
    from gymlab.jsonl import write_text_atomic

    groups, agents, repeats = nemo_profile(records, inputs)
    compact = {"separators": (",", ":")}
    tasks_path, agents_path, repeats_path = profile_paths(path)
    write_text_atomic(tasks_path, "".join(json.dumps(g, **compact) + "\n" for g in groups))
    write_text_atomic(agents_path, json.dumps(agents, **compact))
    write_text_atomic(repeats_path, json.dumps(repeats, **compact))
    return tasks_path, agents_path, repeats_path


__all__ = ["nemo_profile", "profile_paths", "write_nemo_profile"]
