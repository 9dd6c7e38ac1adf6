"""Rollout records held as their JSON lines and validated when used: a run of a million steps in
about the memory of its JSONL, not ten times that in pydantic objects.

A ``RecordStore`` is one ``bytes`` buffer (a record a line, as in the rollouts file) and each line's
start offset and line number. ``record(i)`` validates one line into a ``Rollout``; ``dicts()``
parses every line with orjson for the frames' pure-Python path; ``buffer`` is what pyarrow reads
for their fast path, and ``columns`` what it read (kept, and carried by ``take`` and ``concat``).
A bad line is a ``DatasetError`` naming the file (or ``records`` for records built in memory) and
the line, whenever it is first used.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from typing import Any

import orjson
from pydantic import ValidationError

from gymlab.errors import DatasetError
from gymlab.jsonl import dumps, read_lines
from gymlab.protocol.record import Rollout

IN_MEMORY = "records"


def _line_of(record: Any) -> bytes:
    if isinstance(record, (bytes, bytearray)):
        return bytes(record).rstrip(b"\n")
    if isinstance(record, Rollout):
        return record.model_dump_json(exclude_none=True).encode()
    return dumps(record)


def describe(exc: ValidationError) -> str:
    """The first error of a validation, as ``loc: message``."""
    first = exc.errors()[0]
    loc = ".".join(str(p) for p in first.get("loc", ())) or "record"
    return f"{loc}: {first.get('msg')}"


class RecordStore:
    """Records as JSON lines in one buffer (see the module docstring)."""

    __slots__ = ("buffer", "starts", "numbers", "source", "columns")

    def __init__(self, buffer: bytes, starts: list[int], numbers: list[int] | None = None, source: str | None = None):
        self.buffer = buffer
        self.starts = starts  # len(records) + 1 offsets: line i is buffer[starts[i]:starts[i + 1]]
        self.numbers = numbers
        self.source = source
        self.columns: Any = None  # the fast path's Arrow columns, read once (the records never change)

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> RecordStore:
        """A JSONL file's records, unparsed (a torn last line raises ``DatasetError`` at once)."""
        data, starts, numbers = read_lines(path)
        if numbers and numbers[-1] != len(numbers):  # blank lines: keep the records only (what pyarrow reads)
            lines = [data[a:b].strip() for a, b in zip(starts, [*starts[1:], len(data)])]
            return cls._joined(lines, numbers, str(path))
        return cls(data, [*starts, len(data)], numbers, str(path))

    @classmethod
    def from_records(cls, records: Iterable[Any]) -> RecordStore:
        """Records (``Rollout`` models, dicts or JSON lines) as one buffer; nothing is validated yet."""
        return cls._joined([_line_of(r) for r in records], None, None)

    @classmethod
    def _joined(cls, lines: list[bytes], numbers: list[int] | None, source: str | None) -> RecordStore:
        starts, at = [], 0
        for line in lines:
            starts.append(at)
            at += len(line) + 1
        starts.append(at)
        buffer = b"\n".join(lines) + b"\n" if lines else b""
        return cls(buffer, starts, numbers, source)

    def __len__(self) -> int:
        return len(self.starts) - 1

    def line(self, i: int) -> bytes:
        return self.buffer[self.starts[i] : self.starts[i + 1]]

    def lines(self) -> list[bytes]:
        starts, buffer = self.starts, self.buffer
        return [buffer[a:b] for a, b in zip(starts, starts[1:])]

    def where(self, i: int) -> tuple[str, int]:
        """(file, line number) of record ``i`` (``records``, position + 1 for records built in memory)."""
        return (self.source or IN_MEMORY, self.numbers[i] if self.numbers is not None else i + 1)

    def error(self, i: int, cause: str) -> DatasetError:
        return DatasetError(*self.where(i), cause)

    def record(self, i: int) -> Rollout:
        """Record ``i`` validated into a ``Rollout`` (a bad line raises ``DatasetError`` with its line)."""
        line = self.line(i)
        try:
            return Rollout.model_validate_json(line)
        except ValidationError as exc:
            if any(e.get("type") == "json_invalid" for e in exc.errors()):
                raise self.error(i, f"not valid JSON: {exc.errors()[0].get('msg')}") from None
            raise self.error(i, f"not a rollout record: {describe(exc)}") from None

    def dicts(self) -> Iterator[dict[str, Any]]:
        """Every record parsed (not validated) by orjson; a line that is not a JSON object raises."""
        loads = orjson.loads
        for i, line in enumerate(self.lines()):
            try:
                value = loads(line)
            except orjson.JSONDecodeError as exc:
                raise self.error(i, f"not valid JSON: {exc}") from None
            if not isinstance(value, dict) or "response" not in value:
                raise self.error(i, "not a rollout record: a record is a JSON object with a response")
            yield value

    def take(self, indices: Iterable[int]) -> RecordStore:
        """A store of the records at ``indices`` (their file and line numbers kept)."""
        indices = list(indices)
        numbers = [self.where(i)[1] for i in indices]
        taken = RecordStore._joined([self.line(i).rstrip(b"\n") for i in indices], numbers, self.source)
        if self.columns is not None:  # the frames' Arrow columns come along: no second parse
            taken.columns = self.columns.take(indices)
        return taken

    @staticmethod
    def concat(stores: list[RecordStore]) -> RecordStore:
        """The records of ``stores`` one after the other (line numbers kept when they share a file)."""
        sources = {s.source for s in stores}
        lines = [line.rstrip(b"\n") for s in stores for line in s.lines()]
        if len(sources) == 1 and None not in sources:
            numbers = [n for s in stores for n in (s.numbers or [])]
            joined = RecordStore._joined(lines, numbers, sources.pop())
        else:
            joined = RecordStore._joined(lines, None, None)
        if stores and all(s.columns is not None for s in stores):  # the frames' Arrow columns too
            import pyarrow as pa

            joined.columns = pa.concat_tables([s.columns for s in stores])
        return joined
