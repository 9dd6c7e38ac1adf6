"""NeMo Gym 0.7.0's reward-profiler files (``ng_reward_profile``) from gymlab records (docs/rewards.md)."""

from __future__ import annotations

import json
import os
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from gymlab.protocol.record import RESULT_KEYS
from gymlab.rewards.stats import t_interval_95

_TASK, _REPEAT, _SERVER = "_ng_task_index", "_ng_rollout_index", "_ng_environment_server"
_STATS = ("mean", "max", "min", "median", "std")
#: Repeat-level names that are not point estimates (not summarized across repeats), as NeMo Gym's.
_NOT_PRIMARY_SUFFIXES = (
    *("/max", "/min", "/median", "/p5", "/p25", "/p75", "/p95", "/ci_low_95", "/ci_high_95"),
    *("/ci_lower", "/ci_upper", "_ci_lower", "_ci_upper", "_ci95_lower", "_ci95_upper", "/_ng_attempt_index"),
    *("/std_dev_across_runs", "/std_err_across_runs", "/avg_sample_std_dev"),
)


def order_key(index: Any) -> tuple:
    """A sort key for task and repeat indices that may be missing (None sorts last)."""
    return (index is None, index if isinstance(index, (int, float)) else str(index))


def _key(row: dict[str, Any]) -> tuple:
    return row.get(_TASK), row.get(_REPEAT)


def _numbers(fields: Iterable[tuple[str, Any]]) -> dict[str, float | int]:
    """The numeric and bool values (bools as 0/1) of ``fields``."""
    return {k: int(v) if isinstance(v, bool) else v for k, v in fields if isinstance(v, (int, float))}


def _usage(result: dict[str, Any]) -> dict[str, Any]:
    return (result.get("response") or {}).get("usage") or {}


def _profiled(result: dict[str, Any]) -> dict[str, float | int]:
    """A record's top-level numbers, then its usage counts (which win on a name clash), ``_`` keys left out."""
    return _numbers((k, v) for k, v in {**result, **_usage(result)}.items() if not k.startswith("_"))


def _rollout_info(result: dict[str, Any]) -> dict[str, Any]:
    task, repeat = _key(result)
    info: dict[str, Any] = {"rollout_id": f"{task}:{repeat}", _TASK: task, _REPEAT: repeat}
    if "reward" in result:
        info["reward"] = result["reward"]
    info.update(_numbers(_usage(result).items()))
    info.update(_numbers((k, v) for k, v in result.items() if not k.startswith("_") and k != "reward"))
    return info


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def _describe(frame: Any) -> dict[str, Any]:
    """mean/max/min/median/std of each column (NaN skipped); a one-value std is 0 where every column has one."""
    import pandas as pd

    stats = {"mean": frame.mean(), "max": frame.max(), "min": frame.min(), "median": frame.median(), "std": frame.std()}
    if stats["std"].isna().all():
        full = frame.columns[frame.notna().all()]
        stats["std"][full] = stats["std"][full].fillna(0)
    return {f"{s}/{c}": _plain(v) for s in _STATS for c, v in stats[s].items() if v is not None and pd.notna(v)}


def _labels(rows: list[dict[str, Any]]) -> dict[Any, str]:
    """A label per run key: the agent's name when it names one run, else the key (``rollout_run_labels``)."""
    agent_by_key: dict[Any, Any] = {}
    for row in rows:
        agent_by_key.setdefault(_run_key(row), (row.get("agent_ref") or {}).get("name"))
    agent_by_key.pop(None, None)
    runs = Counter(a for a in agent_by_key.values() if a is not None)  # the run keys of each agent
    labels = {k: a if a is not None and runs[a] == 1 else k for k, a in agent_by_key.items()}
    while clashing := [k for k, label in labels.items() if Counter(labels.values())[label] > 1 and label != k]:
        for k in clashing:
            labels[k] = k
    return labels


def _run_key(row: dict[str, Any]) -> Any:
    return row.get(_SERVER) if row.get(_SERVER) is not None else (row.get("agent_ref") or {}).get("name")


def nemo_profile(
    records: Iterable[Any], inputs: Iterable[dict] | None = None, *, masked_as_missing: bool = False
) -> tuple[list, list, list]:
    """(per-task rows, per-agent, per-repeat metrics) as NeMo Gym's profiler; an unmatched record: ValueError."""
    import pandas as pd

    dumped = (r if isinstance(r, dict) else r.model_dump(mode="json", exclude_unset=True) for r in records)
    results = sorted(dumped, key=lambda r: tuple(map(order_key, _key(r))))
    skip = RESULT_KEYS | {"response", "_ng_result_type"}  # without inputs, a record's own row fields stand in
    every_row = list(inputs) if inputs is not None else [{k: v for k, v in r.items() if k not in skip} for r in results]
    known = {_key(row) for row in every_row}
    if extra := [_key(r) for r in results if _key(r) not in known]:
        raise ValueError(f"{len(extra)} record(s) have no input row; first (task, repeat) keys: {extra[:10]}")
    masked = {_key(r) for r in results if r.get("mask_sample")}
    rows = every_row if masked_as_missing else [row for row in every_row if _key(row) not in masked]
    label = _labels(rows)

    def agent_of(row: dict[str, Any]) -> Any:
        return label.get(_run_key(row))

    per_agent = len({(row.get(_TASK), agent_of(row)) for row in rows}) > len({row.get(_TASK) for row in rows})

    def group_of(row: dict[str, Any]) -> Any:
        return (row.get(_TASK), agent_of(row)) if per_agent else row.get(_TASK)

    expected = Counter(group_of(row) for row in rows)
    kept = {_key(row): row for row in rows}
    measured = [{k: v for k, v in r.items() if k != "mask_sample"} for r in results if not r.get("mask_sample")]
    pairs = [(kept[_key(r)], r) for r in measured if _key(r) in kept]
    by_group: dict[Any, list] = defaultdict(list)
    for pair in pairs:
        by_group[group_of(pair[0])].append(pair)
    groups, agent_rows, repeat_rows = [], [], []
    if pairs:
        frame = pd.DataFrame.from_records(
            [
                {"agent_name": agent_of(row), _TASK: row.get(_TASK), _REPEAT: row.get(_REPEAT), **_profiled(r)}
                for row, r in pairs
            ]
        )
        by = [_TASK, "agent_name"] if per_agent else _TASK
        for key, part in frame.drop(columns=[_REPEAT] if per_agent else [_REPEAT, "agent_name"]).groupby(by):
            group = tuple(map(_plain, key)) if per_agent else _plain(key)
            entry = {_TASK: group[0] if per_agent else group, **_describe(part.drop(columns=by))}
            if per_agent:
                entry["agent_ref"] = {"name": group[1]}
            some, want = by_group[group], expected[group]
            entry.update(
                sample={k: v for k, v in some[0][0].items() if k not in (_TASK, _REPEAT)},
                num_rollouts=len(some),
                expected_num_rollouts=want,
                missing_num_rollouts=want - len(some),
                reward_profile_completion_pct=100.0 if not want else 100.0 * len(some) / want,
                rollout_infos=sorted((_rollout_info(r) for _, r in some), key=lambda i: order_key(i[_REPEAT])),
            )
            groups.append(entry)
        for name, part in frame.drop(columns=[_REPEAT, _TASK]).groupby("agent_name"):
            agent_rows.append({**_describe(part.drop(columns=["agent_name"])), "agent_ref": {"name": name}})
        repeat_rows = _repeat_level(frame)
        across = _across_repeats(repeat_rows)
        for entry in agent_rows:
            entry.update(across.get(entry["agent_ref"]["name"], {}))
    _add_coverage(agent_rows, every_row, results)
    return groups, agent_rows, repeat_rows


def _add_coverage(agent_rows: list[dict], rows: list[dict], results: list[dict]) -> None:
    """Each partly masked agent's coverage: how many rollouts and tasks its figures come from."""
    agent_of_key = {_key(row): (row.get("agent_ref") or {}).get("name") for row in rows}
    per_agent: dict[str, list] = defaultdict(list)
    for r in results:
        name = agent_of_key.get(_key(r)) or (r.get("agent_ref") or {}).get("name")
        if name is not None:
            per_agent[name].append(r)
    coverage = {}
    for name, rs in per_agent.items():
        measured = {r.get(_TASK, 0) for r in rs if not r.get("mask_sample")}
        if masked := sum(bool(r.get("mask_sample")) for r in rs):
            coverage[name] = {
                "coverage/measured_rollouts": len(rs) - masked,
                "coverage/masked_rollouts": masked,
                "coverage/measured_tasks": len(measured),
                "coverage/fully_masked_tasks": len({r.get(_TASK, 0) for r in rs} - measured),
            }
    for entry in agent_rows:
        entry.update(coverage.pop(entry["agent_ref"]["name"], {}))
    agent_rows += [{"agent_ref": {"name": name}, **c} for name, c in coverage.items()]


def _spread(entry: dict[str, Any], v: Any, col: str, names: tuple[str, ...], tag: str = "") -> None:
    """Add the series ``v``'s statistics ``names`` as ``<name><tag>/<col>``, then its 95% interval."""
    v = v.dropna()
    n = len(v)
    if not n:
        return
    d = v.describe().rename({"50%": "median", "25%": "p25", "75%": "p75"}).astype(float).to_dict()
    d["std"] = d["std"] if n > 1 else 0.0
    stats = {**d, "sem": d["std"] / n**0.5, "se": d["std"] / n**0.5}
    entry.update({f"{name}{tag}/{col}": stats[name] for name in names})
    if n > 1:
        entry[f"ci_low_95{tag}/{col}"], entry[f"ci_high_95{tag}/{col}"] = t_interval_95(stats["mean"], stats["se"], n)


def _repeat_level(frame: Any) -> list[dict[str, Any]]:
    """Per agent and repeat index, each field's spread over the tasks (agents with several repeats)."""
    columns = frame.select_dtypes(include="number").columns.difference([_TASK, _REPEAT])
    repeats = frame.groupby("agent_name")[_REPEAT].nunique()
    frame = frame[frame["agent_name"].isin(set(repeats[repeats > 1].index))]
    tasks = frame.groupby("agent_name")[_TASK].nunique()
    out = []
    for (agent, repeat), part in frame.groupby(["agent_name", _REPEAT]):
        present = int(part[_TASK].nunique())
        entry: dict[str, Any] = {
            "agent_ref": {"name": agent},
            _REPEAT: int(repeat),
            "sample_count": present,
            "missing_count": int(tasks[agent]) - present,
        }
        for col in columns:
            _spread(entry, part[col], col, ("mean", "median", "std", "sem", "min", "max", "p25", "p75"))
        out.append(entry)
    return out


def _across_repeats(repeats: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Per agent, each per-repeat point estimate (``mean/<field>``) summarized over the repeats."""
    import pandas as pd

    if not repeats:
        return {}
    frame = pd.DataFrame.from_records(repeats)
    frame["agent_name"] = frame["agent_ref"].map(lambda ref: ref["name"])
    columns = [
        c
        for c in frame.select_dtypes(include="number").columns
        if c.startswith("mean/") and not c.endswith(_NOT_PRIMARY_SUFFIXES) and "_across_repeats/" not in c
    ]
    out: dict[str, dict[str, float]] = {}
    for agent, part in frame.groupby("agent_name"):
        entry: dict[str, float] = {}
        for col in columns:
            _spread(entry, part[col], col, ("mean", "median", "std", "min", "max", "se"), "_across_repeats")
        out[agent] = entry
    return out


def profile_paths(path: str | os.PathLike) -> tuple[Path, Path, Path]:
    """Where NeMo Gym puts the three files for rollouts file ``path``."""
    base = Path(path)
    names = ("reward_profiling.jsonl", "agent_metrics.json", "repeat_level_metrics.json")
    return tuple(base.with_name(f"{base.stem}_{name}") for name in names)  # type: ignore[return-value]


def write_nemo_profile(
    records: Iterable[Any],
    path: str | os.PathLike,
    inputs: Iterable[dict] | None = None,
    *,
    masked_as_missing: bool = False,
) -> tuple[Path, Path, Path]:
    """Write NeMo Gym's three profiler files beside rollouts file ``path``; returns their paths."""
    from gymlab.jsonl import write_atomic

    groups, agents, repeats = nemo_profile(records, inputs, masked_as_missing=masked_as_missing)
    compact = (",", ":")
    tasks_path, agents_path, repeats_path = profile_paths(path)
    write_atomic(tasks_path, "".join(json.dumps(g, separators=compact) + "\n" for g in groups))
    write_atomic(agents_path, json.dumps(agents, separators=compact))
    write_atomic(repeats_path, json.dumps(repeats, separators=compact))
    return tasks_path, agents_path, repeats_path
