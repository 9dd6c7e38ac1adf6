"""Collection split over plain hosts: shard i of n takes the tasks with ``task_index % n + 1 == i``,
so every repeat of a task stays in one shard (docs/collection.md); ``merge`` joins them."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from gymlab.errors import ConfigError
from gymlab.jsonl import dumps, write_text_atomic


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
    write_text_atomic(path, json.dumps({"shard": list(parse_shard(shard)), "inputs_sha256": digest.hexdigest()}))


__all__ = ["in_shard", "parse_shard", "record_shard", "shard_of"]
