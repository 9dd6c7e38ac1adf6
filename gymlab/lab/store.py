"""Rollout records held as their JSON lines in one buffer, validated when used (``RecordStore``), and
filled as a run's records finish (``StoreBuilder``); docs/frames.md."""

from __future__ import annotations

import os
from array import array
from collections.abc import Iterable, Iterator
from itertools import accumulate
from typing import Any

from pydantic import ValidationError

from gymlab.errors import DatasetError
from gymlab.jsonl import dumps, loads, read_lines
from gymlab.protocol.derived_steps import STEPS_KEY, derived_steps, has_steps
from gymlab.protocol.record import Rollout, record_json
from gymlab.protocol.validation import describe_validation


def _line_of(record: Any) -> bytes:
    if isinstance(record, (bytes, bytearray)):
        return bytes(record).rstrip(b"\n")
    if isinstance(record, Rollout):
        return record_json(record).encode()
    if type(record) is dict and "steps" not in record and isinstance(record.get("response"), dict):
        record = {**record, "steps": derived_steps(record)}  # a record written without steps (NeMo Gym's)
    return dumps(record)


def _steps_filled(line: bytes) -> bytes:
    """A record's line with ``derived_steps`` added when it has none (NeMo Gym's); else, or not a record, as it is."""
    try:
        data = loads(line)
    except (ValueError, RecursionError):  # not JSON: the line is kept, and reported where it is read
        return line
    if not isinstance(data, dict) or "steps" in data or not isinstance(data.get("response"), dict):
        return line
    return dumps({**data, "steps": derived_steps(data)})


class RecordStore:
    """Records as JSON lines in one buffer with each line's start and number: ``record(i)`` validates one,
    ``dicts()`` parses all, pyarrow reads ``buffer`` for the steps frame and keeps ``columns``."""

    __slots__ = ("buffer", "starts", "numbers", "source", "columns", "steps_keys")

    def __init__(self, buffer: bytes, starts: list[int], numbers: list[int] | None = None, source: str | None = None):
        self.buffer = buffer
        self.starts = starts  # len(records) + 1 offsets: line i is buffer[starts[i]:starts[i + 1]]
        self.numbers = numbers
        self.source = source
        self.columns: Any = None  # the steps frame's Arrow columns, read once (the records never change)
        self.steps_keys: Any = None  # int64 array: where each record's "steps" key starts (-1: none), from a file

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> RecordStore:
        """A JSONL file's records, unparsed (a torn last line raises ``DatasetError`` at once)."""
        data, starts, numbers = read_lines(path)
        ends = [*starts[1:], len(data)]
        find = data.find
        keys = [find(STEPS_KEY, a, b) for a, b in zip(starts, ends)]  # one search: has_steps starts there
        bare = [i for i, (a, b, at) in enumerate(zip(starts, ends, keys)) if not has_steps(data, max(a, at), b)]
        if bare or (numbers and numbers[-1] != len(numbers)):  # blank lines: keep the records only (what pyarrow reads)
            lines = [data[a:b].strip() for a, b in zip(starts, ends)]
            for i in bare:  # records written without steps (NeMo Gym's) get them from their output
                lines[i] = _steps_filled(lines[i])
            return cls._joined(lines, numbers, str(path))
        store = cls(data, [*starts, len(data)], numbers, str(path))
        store.steps_keys = array("q", keys)  # 8 bytes a record, not a list's 36
        return store

    @classmethod
    def from_records(cls, records: Iterable[Any]) -> RecordStore:
        """Records (``Rollout`` models, dicts or JSON lines) as one buffer; nothing is validated yet."""
        return cls._joined([_line_of(r) for r in records])

    @classmethod
    def _joined(cls, lines: list[bytes], numbers: list[int] | None = None, source: str | None = None) -> RecordStore:
        starts = [0, *accumulate(len(line) + 1 for line in lines)]
        buffer = b"\n".join([*lines, b""])  # one copy (``join(...) + b"\n"`` would make two)
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
        return (self.source or "records", self.numbers[i] if self.numbers is not None else i + 1)

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
            raise self.error(i, f"not a rollout record: {describe_validation(exc, 'record')}") from None

    def dicts(self) -> Iterator[dict[str, Any]]:
        """Every record parsed (not validated) where it lies in the buffer (``jsonl.loads``); a bad line raises."""
        view, starts = memoryview(self.buffer), self.starts
        for i in range(len(starts) - 1):
            try:
                value = loads(bytes(view[starts[i] : starts[i + 1]]))
            except (ValueError, RecursionError) as exc:
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
            import pyarrow as pa

            taken.columns = self.columns.take(pa.array(indices, pa.int64()))  # typed: an empty list is too
        return taken

    @staticmethod
    def concat(stores: list[RecordStore]) -> RecordStore:
        """The records of ``stores`` one after the other (line numbers kept when they share a file)."""
        sources = {s.source for s in stores}
        (source,) = sources if len(sources) == 1 else (None,)
        numbers = [n for s in stores for n in (s.numbers or [])] if source is not None else None
        joined = RecordStore._joined([line.rstrip(b"\n") for s in stores for line in s.lines()], numbers, source)
        if stores and all(s.columns is not None for s in stores):  # the frames' Arrow columns too
            import pyarrow as pa

            joined.columns = pa.concat_tables([s.columns for s in stores])
        return joined


class StoreBuilder:
    """A run's records, added by position as they finish, made a ``RecordStore`` by ``finish``; those
    finished from the start on go straight into one growing buffer."""

    def __init__(self, total: int):
        self.total = total
        self.data = bytearray()  # records [0, ready), one a line
        self.starts = [0]  # their offsets in data, and the end
        self.ahead_of: dict[int, bytes] = {}  # finished records past the first unfinished one
        self.ready = 0  # records [0, ready) have finished
        self.store: RecordStore | None = None

    def add(self, position: int, record: Any) -> None:
        """Hold ``record`` (as its JSON line) at ``position``."""
        self.ahead_of[position] = _line_of(record)
        data, starts = self.data, self.starts
        while self.ready in self.ahead_of:
            data += self.ahead_of.pop(self.ready)
            data += b"\n"
            starts.append(len(data))
            self.ready += 1

    def line(self, position: int) -> bytes:
        """The JSON line of the record finished at ``position``."""
        if self.store is not None:
            return self.store.line(position).rstrip(b"\n")
        if position < self.ready:
            return bytes(self.data[self.starts[position] : self.starts[position + 1] - 1])
        return self.ahead_of[position]

    def finish(self) -> RecordStore:
        """The store of every record, in position order (each position must have its record)."""
        if self.ready < self.total:
            raise ValueError(f"{self.total - self.ready} record(s) of the run were never added")
        store = RecordStore(bytes(self.data), self.starts, None, None)
        self.data = bytearray()  # the one copy is the store's now
        self.store = store
        return store
