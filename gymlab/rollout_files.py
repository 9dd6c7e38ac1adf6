"""Whole-file JSONL writes that never leave a half-written file (temp file in the same folder + rename)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator


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


def iter_jsonl(path: str | os.PathLike) -> Iterator[tuple[int, dict]]:
    """``(line number, object)`` for every non-blank line of a JSONL file.

    A line that is not JSON, or not an object, raises ``DatasetError`` naming the file and line; a
    last line cut off mid-record (no newline, not JSON) is reported as torn.
    """
    from gymlab.errors import DatasetError

    path = Path(path)
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError as exc:
                if not line.endswith("\n"):
                    raise DatasetError(str(path), number, f"torn last line: the file ends mid-record ({exc}); "
                                       "was the write interrupted? re-export it or delete the line") from None
                raise DatasetError(str(path), number, f"not valid JSON: {exc}") from None
            if not isinstance(value, dict):
                raise DatasetError(str(path), number, f"expected a JSON object, got {type(value).__name__}")
            yield number, value
