"""The files of one collection (``NAME.jsonl``, ``_materialized_inputs``, ``_failures``,
``_aggregate_metrics``, ``_shard``) and the (task, repeat) key that names each record in them."""

from __future__ import annotations

import os
from array import array
from collections.abc import Callable
from pathlib import Path
from typing import Any

from gymlab.errors import DatasetError
from gymlab.jsonl import atomic_file, iter_appendable
from gymlab.run.sinks import Key, key_of


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


def sort_key(record: dict[str, Any]) -> tuple:
    """Where a record sorts: its (task, repeat) key in "aabbcc" order, tasks of one type together."""
    t, r = key_of(record)
    return (str(type(t)), t if t is not None else 0, r if r is not None else 0)


def rewrite_sorted(path: Path, *, keep: Callable[[Key], bool] | None = None, what: str = "rollouts") -> int:
    """Rewrite an appended file in (task, repeat) order, atomically, holding only each line's key and
    place (32 bytes a line): a key's last line wins, ``keep`` drops keys. Returns the lines written.
    A key that is not a pair of whole numbers is a ``DatasetError`` naming its line."""
    import numpy as np

    if not path.exists():
        return 0
    tasks, repeats, offsets, lengths = (array("q") for _ in range(4))
    for number, offset, line, record in iter_appendable(path, what=what):
        task, repeat = key_of(record)
        if type(task) is not int or type(repeat) is not int:
            raise DatasetError(
                str(path), number, f"task and repeat indices must be whole numbers, not {task!r}, {repeat!r}"
            )
        tasks.append(task)
        repeats.append(repeat)
        offsets.append(offset)
        lengths.append(len(line))
    t, r = np.frombuffer(tasks, dtype=np.int64), np.frombuffer(repeats, dtype=np.int64)
    order = np.lexsort((np.arange(len(t)), r, t))  # by task, repeat, then place: a key's last line ends its run
    last = np.ones(len(order), dtype=bool)
    last[:-1] = (t[order][1:] != t[order][:-1]) | (r[order][1:] != r[order][:-1])
    written = 0
    with open(path, "rb") as source, atomic_file(path) as out:
        for i in order[last].tolist():
            if keep is not None and not keep((tasks[i], repeats[i])):
                continue
            source.seek(offsets[i])
            out.write(source.read(lengths[i]))
            written += 1
    return written
