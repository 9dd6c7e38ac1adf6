"""JSONL files: the one line reader (``_scan``), the one atomic writer and the one appender."""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from gymlab.errors import DatasetError, PersistenceError


def iter_jsonl(path: str | os.PathLike, *, what: str = "row") -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line number, object)`` for every non-blank line; a bad file or line is a ``DatasetError`` naming both."""
    for number, _, _, record in _scan(Path(path), what, appended=False):
        yield number, record


def read_appendable(path: Path, *, repair: bool = True, what: str = "rollouts") -> list[dict[str, Any]]:
    """The records of a JSONL file a run appends to ([] when it does not exist yet); see ``iter_appendable``."""
    return [record for _, _, _, record in iter_appendable(path, repair=repair, what=what)]


def iter_appendable(
    path: Path, *, repair: bool = True, what: str = "rollouts"
) -> Iterator[tuple[int, int, bytes, dict[str, Any]]]:
    """``(line number, offset, line, record)`` of a file a run appends to: a torn last line is cut off, a whole
    one missing its newline gets it (``repair=False``: file left alone); a bad complete line: ``DatasetError``."""
    if path.exists():
        yield from _scan(path, what, appended=True, repair=repair)


def _scan(
    path: Path, what: str, *, appended: bool, repair: bool = False
) -> Iterator[tuple[int, int, bytes, dict[str, Any]]]:
    """The one line reader: a torn last line raises, or (``appended``: a crash cut it off) is dropped."""
    try:
        f = open(path, "rb")
    except OSError as exc:
        raise DatasetError(str(path), None, f"cannot read: {exc.strerror or exc}") from None
    offset = 0
    with f:
        for number, line in enumerate(f, 1):
            at, offset = offset, offset + len(line)
            if not line.strip():
                continue
            whole = line.endswith(b"\n")  # else the last line: a whole record missing only its newline, or torn
            try:
                record = orjson.loads(line)
                if long_int(line):  # orjson read an integer past 64 bits as a float: read it exactly
                    record = json.loads(line)
            except ValueError as exc:
                if whole:
                    why = f"damaged {what} line ({exc}); fix or delete that line, then rerun to redo its rollout"
                    raise DatasetError(str(path), number, why if appended else f"not valid JSON: {exc}") from None
                if not appended:
                    raise _torn(path, number, exc) from None
                record = None
            if not whole and appended:
                if isinstance(record, dict):
                    if repair:
                        with open(path, "ab") as out:
                            out.write(b"\n")
                    yield number, at, line + b"\n", record
                elif repair:
                    print(
                        f"gymlab collect: {path}: removed a partial last line ({len(line)} bytes) left by an "
                        "interrupted run; its rollout will run again",
                        file=sys.stderr,
                    )
                    with open(path, "r+b") as out:
                        out.truncate(at)
                return
            if not isinstance(record, dict):
                line_ = " line" if appended else ""
                raise DatasetError(str(path), number, f"a {what}{line_} is a JSON object, not {type(record).__name__}")
            yield number, at, line, record


_OPTIONS = orjson.OPT_NON_STR_KEYS
_DIGITS_AS_ZERO = bytes.maketrans(b"123456789", b"000000000")
_LONG_RUN = b"0" * 19


def long_int(raw: bytes) -> bool:
    """Whether ``raw`` holds a run of 19 or more digits that is no float's fraction, exponent or mantissa
    (orjson reads such an integer as a float; the standard library exactly)."""
    flat = raw.translate(_DIGITS_AS_ZERO)
    at = flat.find(_LONG_RUN)
    while at != -1:
        end = at + len(_LONG_RUN)
        while end < len(flat) and flat[end] == 48:  # b"0"
            end += 1
        if flat[at - 1 : at] not in _FLOAT_EDGES and flat[end : end + 1] not in _FLOAT_EDGES:
            return True
        at = flat.find(_LONG_RUN, end)
    return False


_FLOAT_EDGES = (b".", b"e", b"E")


def loads(data: bytes | str) -> Any:
    """``data`` parsed as the standard library parses it, by orjson where it can (not long integers, NaN, surrogates)."""
    raw = data.encode() if isinstance(data, str) else data
    try:
        if not long_int(raw):
            return orjson.loads(raw)
    except ValueError:
        pass
    return json.loads(data)


def dumps(value: Any) -> bytes:
    """``value`` as compact UTF-8 JSON (keys and unknown types as strings); big ints by the standard library."""
    try:
        return orjson.dumps(value, default=str, option=_OPTIONS)
    except TypeError:
        return json.dumps(value, default=str, separators=(",", ":"), ensure_ascii=False).encode()


def json_line(record: Any) -> str:
    """One record as JSON text: a rollout by ``record_json``, another model without its None fields."""
    if hasattr(record, "model_dump_json"):
        from gymlab.protocol.record import Rollout, record_json

        return record_json(record) if isinstance(record, Rollout) else record.model_dump_json(exclude_none=True)
    return dumps(record).decode()


def _torn(path: Path, number: int, exc: Exception) -> DatasetError:
    return DatasetError(
        str(path),
        number,
        f"torn last line: the file ends mid-record ({exc}); was the write interrupted? re-export it or delete the line",
    )


_BLANK = frozenset({b"\n", b"\r", b" ", b"\t", b""})


def read_lines(path: str | os.PathLike) -> tuple[bytes, list[int], list[int]]:
    """A JSONL file's bytes, with each non-blank line's start offset and number (unparsed; torn: an error)."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise DatasetError(str(path), None, f"cannot read: {exc.strerror or exc}") from None
    starts: list[int] = []
    numbers: list[int] = []
    start, number, size = 0, 1, len(data)
    find = data.find
    while start < size:
        end = find(b"\n", start)
        end = size if end < 0 else end + 1
        if data[start : start + 1] not in _BLANK or data[start:end].strip():  # blank lines are skipped
            starts.append(start)
            numbers.append(number)
        start, number = end, number + 1
    if data and not data.endswith(b"\n") and starts:
        try:
            orjson.loads(data[starts[-1] :])
        except ValueError as exc:
            raise _torn(path, numbers[-1], exc) from None
    return data, starts, numbers


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """A binary file that becomes ``path`` when the block succeeds (fsynced temp file renamed); ``PersistenceError``."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        name = path.parent / f".{path.name}.{os.urandom(6).hex()}.tmp"
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        tmp = name
        with os.fdopen(fd, "wb") as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as exc:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError):
            raise PersistenceError(str(path), exc) from exc
        raise


def write_jsonl_atomic(path: str | os.PathLike, records: Iterable[Any]) -> Path:
    """Write one record a line (``json_line``) to ``path`` atomically: readers see the old file or the new one."""
    with atomic_file(path) as f:
        f.writelines((json_line(record) + "\n").encode() for record in records)
    return Path(path)


def write_atomic(path: str | os.PathLike, data: bytes | str) -> Path:
    """Write ``data`` to ``path`` atomically: bytes as they are (whole JSONL content), text ending in one
    newline (a JSON summary beside the JSONL files)."""
    with atomic_file(path) as f:
        f.write((data.rstrip("\n") + "\n").encode() if isinstance(data, str) else data)
    return Path(path)


class LineWriter:
    """Appends whole lines with one ``os.write`` each (no user-space buffer to lose on a kill)."""

    def __init__(self, path: Path):
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as exc:
            raise PersistenceError(str(path), exc) from exc

    def write(self, record: dict[str, Any]) -> None:
        """Append one line; a write that fails part-way is cut back off, so no line is left torn."""
        data = dumps(record) + b"\n"
        start = os.lseek(self.fd, 0, os.SEEK_END)
        try:
            while data:
                data = data[os.write(self.fd, data) :]
        except OSError as exc:
            os.ftruncate(self.fd, start)
            raise PersistenceError(str(self.path), exc) from exc

    def close(self) -> None:
        os.close(self.fd)
