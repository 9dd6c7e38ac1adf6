"""Whole-file JSONL writes that never leave a half-written file (temp file in the same folder + rename)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable


def write_jsonl_atomic(path: str | os.PathLike, records: Iterable[Any]) -> Path:
    """Write one JSON object a line to ``path`` atomically: readers see the old file or the new one."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for record in records:
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with_suppressed_unlink(tmp)
        raise
    return path


def with_suppressed_unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
