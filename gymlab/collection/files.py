"""The files of one collection, the (task, repeat) key that names each record in them, and shards."""

from __future__ import annotations

import hashlib
import json
import os
from array import array
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from gymlab.errors import ConfigError, DatasetError
from gymlab.jsonl import atomic_file, dumps, iter_appendable, write_atomic
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
    place (32 bytes a line): a key's last line wins, ``keep`` drops keys. Returns the lines written."""
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


def parse_shard(shard: tuple[int, int] | str) -> tuple[int, int]:
    """``"i/n"`` or ``(i, n)`` checked: 1 <= i <= n."""
    try:
        i, n = (int(part) for part in shard.split("/")) if isinstance(shard, str) else shard
    except (TypeError, ValueError):  # not two numbers: refused below
        i = n = None
    if not (isinstance(i, int) and isinstance(n, int)) or not 1 <= i <= n:
        raise ConfigError(f"shard {shard!r}: expected i/n with 1 <= i <= n (shards count from 1), such as 1/4")
    return i, n


def shard_of(task_index: int, n: int) -> int:
    """The shard (1..n) that holds task ``task_index``."""
    return task_index % n + 1


def in_shard(jobs: Iterable[dict[str, Any]], shard: tuple[int, int] | str) -> Iterator[dict[str, Any]]:
    """The jobs of shard ``i/n``, in their order, as they are read (the shard is checked at once)."""
    i, n = parse_shard(shard)
    return (job for job in jobs if shard_of(job.get("_ng_task_index"), n) == i)


def record_shard(path: Path, shard: tuple[int, int] | str, rows: Iterable[dict[str, Any]], **options: Any) -> None:
    """Write ``path`` (``NAME_shard.json``): the shard, and a SHA-256 of the whole run's input rows and
    the options that make jobs of them, equal on every host that collects them the same way."""
    digest = hashlib.sha256(dumps(options))
    for row in rows:
        digest.update(dumps(row) + b"\n")
    write_atomic(path, json.dumps({"shard": list(parse_shard(shard)), "inputs_sha256": digest.hexdigest()}))
