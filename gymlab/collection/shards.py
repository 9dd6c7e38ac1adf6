"""Collection split over plain hosts: shard i of n takes the tasks whose index falls in it.

A task's shard is ``task_index mod n`` (1-based: shard ``t % n + 1``). Sharding by task, not by
(task, repeat), keeps every repeat of a row in one shard, so one shard's file holds each task's
whole group (what a per-task metric or a GRPO group needs) and the shards never touch the same
key (task indices are whole numbers: ``expand`` refuses any other). ``gymlab merge`` (``merge``) joins the shard outputs into one collection; each shard
writes ``NAME_shard.json`` (``record_shard``) so the merge can refuse shards of different inputs.
"""

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
    if isinstance(shard, str):
        i_text, sep, n_text = shard.partition("/")
        try:
            i, n = int(i_text), int(n_text)
        except ValueError:
            i = n = 0
        if not sep or n < 1:
            raise ConfigError(f"--shard {shard!r}: expected i/n with 1 <= i <= n, such as 1/4")
    else:
        i, n = shard
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
    """Write ``path`` (``NAME_shard.json``): the shard, and a SHA-256 of every input row of the whole
    run (all shards) with the options that make jobs of them (repeats, overrides), equal on every host
    that collects the same rows the same way."""
    digest = hashlib.sha256(dumps(options))
    for row in rows:
        digest.update(dumps(row) + b"\n")
    write_text_atomic(path, json.dumps({"shard": list(parse_shard(shard)), "inputs_sha256": digest.hexdigest()}))


__all__ = ["in_shard", "parse_shard", "record_shard", "shard_of"]
