"""The files of one collection, and the (task, repeat) key that names each record in them.

``NAME.jsonl`` (rollouts), ``NAME_materialized_inputs.jsonl`` (the rows as sent), ``NAME_failures.jsonl``
(rows that still failed after the retries) and ``NAME_aggregate_metrics.json``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

Key = tuple[Any, Any]


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


def sort_key(record: dict[str, Any]) -> tuple:
    t, r = key_of(record)
    return (str(type(t)), t if t is not None else 0, r if r is not None else 0)
