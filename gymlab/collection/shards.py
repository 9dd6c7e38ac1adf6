"""Collection split over plain hosts: shard i of n takes the tasks whose index falls in it.

A task's shard is ``task_index mod n`` (1-based: shard ``t % n + 1``). Sharding by task, not by
(task, repeat), keeps every repeat of a row in one shard, so one shard's file holds each task's
whole group (what a per-task metric or a GRPO group needs) and the shards never touch the same
key. A task index that is not an integer goes by a stable hash of its JSON (CRC-32), the same on
every host. ``gymlab merge`` (``merge``) joins the shard outputs into one collection.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Iterator
from typing import Any

from gymlab.errors import ConfigError


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


def shard_of(task_index: Any, n: int) -> int:
    """The shard (1..n) that holds task ``task_index``."""
    if isinstance(task_index, int) and not isinstance(task_index, bool):
        return task_index % n + 1
    return zlib.crc32(json.dumps(task_index, sort_keys=True).encode()) % n + 1


def in_shard(jobs: Iterable[dict[str, Any]], shard: tuple[int, int] | str) -> Iterator[dict[str, Any]]:
    """The jobs of shard ``i/n``, in their order, as they are read (the shard is checked at once)."""
    i, n = parse_shard(shard)
    return (job for job in jobs if shard_of(job.get("_ng_task_index"), n) == i)


__all__ = ["in_shard", "parse_shard", "shard_of"]
