"""The files of one collection, and the (task, repeat) key that names each record in them.

``NAME.jsonl`` (rollouts), ``NAME_materialized_inputs.jsonl`` (the rows as sent), ``NAME_failures.jsonl``
(rows that still failed after the retries) and ``NAME_aggregate_metrics.json``; a shard
(``--shard``) also writes ``NAME_shard.json``: which shard, and what identifies the whole run's inputs.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gymlab.jsonl import atomic_file, iter_appendable

Key = tuple[Any, Any]


def output_paths(output: str | os.PathLike) -> dict[str, Path]:
    """The files of a collection named after ``output`` (``NAME.jsonl``)."""
    out = Path(output)
    stem = out.with_suffix("") if out.suffix == ".jsonl" else out
    return {
        "rollouts": stem.with_name(stem.name + ".jsonl"),
        "materialized_inputs": stem.with_name(stem.name + "_materialized_inputs.jsonl"),
        "failures": stem.with_name(stem.name + "_failures.jsonl"),
        "aggregate_metrics": stem.with_name(stem.name + "_aggregate_metrics.json"),
        "shard": stem.with_name(stem.name + "_shard.json"),
    }


def key_of(record: dict[str, Any]) -> Key:
    return (record.get("_ng_task_index"), record.get("_ng_rollout_index"))


def sort_key(record: dict[str, Any]) -> tuple:
    return key_order(key_of(record))


def key_order(key: Key) -> tuple:
    """Where a (task, repeat) key sorts: "aabbcc" order, tasks of one type together."""
    t, r = key
    return (str(type(t)), t if t is not None else 0, r if r is not None else 0)


def rewrite_sorted(path: Path, *, keep: Callable[[Key], bool] | None = None, what: str = "rollouts") -> int:
    """Rewrite an appended file in (task, repeat) order, atomically, holding only each line's key
    and place (never the records): the last line of each key wins, ``keep`` drops keys. Returns
    the lines written."""
    if not path.exists():
        return 0
    places: dict[Key, tuple[int, int]] = {}
    for _, offset, line, record in iter_appendable(path, what=what):
        places[key_of(record)] = (offset, len(line))
    order = sorted((k for k in places if keep is None or keep(k)), key=key_order)
    with open(path, "rb") as source, atomic_file(path) as out:
        for k in order:
            offset, length = places[k]
            source.seek(offset)
            out.write(source.read(length))
    return len(order)
