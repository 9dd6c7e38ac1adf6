"""The steps frame through pyarrow: the records' JSON read into Arrow columns, and Arrow compute.

The fast path of ``gymlab.lab.frames.steps_frame`` (the ``fast`` extra): the records' buffer is cut
into pieces of whole records, and a thread per core reads a piece at a time with pyarrow's JSON
reader (only the step fields the frame shows) and derives that piece's columns with Arrow compute,
without a Python call per step (steps of more than one item, rare, are described in Python); the
pieces' columns are then joined (strings stay in Arrow memory, as the pure path's do). A run's
records are read while it goes on (``read_in_background``, fed by ``gymlab.lab.store.StoreBuilder``),
so its first frame derives the columns of what was read and reads only the rest.
Records whose JSON does not fit the schema (a message whose content is a string, a field of
another type), and steps with rubric components, return None, and the pure-Python path builds the
frame; both give the same frame.
"""

from __future__ import annotations

import bisect
import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from gymlab.lab.step_columns import describe_action, finish_steps

_TEXT_PART = pa.struct([("text", pa.string())])
_ITEM = pa.struct(
    [
        ("type", pa.string()),
        ("name", pa.string()),
        ("arguments", pa.string()),
        ("content", pa.list_(_TEXT_PART)),
    ]
)
_STEP = pa.struct(
    [
        ("index", pa.int64()),
        ("action", pa.list_(_ITEM)),
        ("tool_outputs", pa.list_(pa.struct([("output", pa.string())]))),
        ("observation", pa.string()),
        ("reward", pa.float64()),
        ("terminated", pa.bool_()),
        ("truncated", pa.bool_()),
        ("tool_errors", pa.int64()),
        ("duration_s", pa.float64()),
        ("reward_components", pa.struct([])),  # only whether a step has rubric components
    ]
)
SCHEMA = pa.schema([("steps", pa.list_(_STEP)), ("response", pa.struct([("id", pa.string())]))])
_PARSE = pj.ParseOptions(explicit_schema=SCHEMA, unexpected_field_behavior="ignore")


#: Bytes of whole records one worker parses (and turns into columns) at a time: at most this, and
#: small enough that every core gets a few pieces of a small run.
PIECE = (1 << 20, 16 << 20)


def _workers() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _pieces(store: Any, first: int = 0) -> list[tuple[pa.Buffer, int, int]]:
    """The store's buffer from record ``first`` on, cut into pieces of whole records (see ``PIECE``),
    as (bytes, number of records, longest record)."""
    starts, n = store.starts, len(store)
    if n <= first:
        return []
    buffer = pa.py_buffer(store.buffer)
    sizes = np.diff(np.asarray(starts, dtype="int64"))
    target = min(max(PIECE[0], (starts[n] - starts[first]) // (4 * _workers())), PIECE[1])
    pieces = []
    while first < n:
        last = bisect.bisect_left(starts, starts[first] + target, first + 1, n)
        size = starts[last] - starts[first]
        pieces.append((buffer.slice(starts[first], size), last - first, int(sizes[first:last].max())))
        first = last
    return pieces


def _parse(piece: tuple[pa.Buffer, int, int], parse: pj.ParseOptions) -> pa.Table | None:
    """One piece read with ``parse`` on this thread (None when a record does not fit the schema or
    is not a rollout record). A block holds whole records, so it is at least twice the longest."""
    data, n, longest = piece
    options = pj.ReadOptions(block_size=max(1 << 24, 2 * longest + 1), use_threads=False)
    try:
        table = pj.read_json(pa.BufferReader(data), read_options=options, parse_options=parse)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    if table.num_rows != n or table["response"].null_count:
        return None
    return table


_background: ThreadPoolExecutor | None = None
_background_lock = threading.Lock()


def read_in_background(data: bytes, n: int, longest: int) -> Future:
    """A piece of ``n`` whole records read on a background thread: a future of its table (None when
    a record does not fit the schema). One thread, so a run's reading takes at most one core."""
    global _background
    with _background_lock:
        if _background is None:
            _background = ThreadPoolExecutor(1, thread_name_prefix="gymlab-read-ahead")
    return _background.submit(_parse, (pa.py_buffer(data), n, longest), _PARSE)


def _read_ahead(store: Any) -> tuple[list[pa.Table], int] | None:
    """The tables read while ``store``'s run went on and how many records they cover ((``[]``, 0)
    when none were); None when one of them did not fit the schema."""
    if store.ahead is None:
        return [], 0
    futures, covered = store.ahead
    try:
        tables = [future.result() for future in futures]
    except Exception:  # a failed read: the records are read again, here
        return [], 0
    return None if any(t is None for t in tables) else (tables, covered)


def _parallel(work, items: list) -> list:
    """``work`` over ``items`` on every core (pyarrow releases the GIL while it parses and computes)."""
    workers = min(_workers(), len(items))
    if workers <= 1:
        return [work(item) for item in items]
    with ThreadPoolExecutor(workers, thread_name_prefix="gymlab-frames") as pool:
        return list(pool.map(work, items))


def _read(store: Any, parse: pj.ParseOptions) -> pa.Table | None:
    """Every record read with ``parse``, the pieces in parallel (None when one does not fit)."""
    tables = _parallel(lambda piece: _parse(piece, parse), _pieces(store))
    if not tables or any(t is None for t in tables):
        return None
    return pa.concat_tables(tables)


def read_steps(store: Any) -> pa.Table | None:
    """The step fields of every record (None when a record does not fit the schema)."""
    return _read(store, _PARSE)


def _taken(values: pa.Array, at: np.ndarray, keep: np.ndarray) -> pa.Array:
    """``values[at]`` where ``keep``, else null (a slice, without copying, when every position is kept
    and they follow each other)."""
    if len(at) == 0:
        return values.slice(0, 0)
    if len(values) == 0:
        return pa.nulls(len(at), values.type)
    if keep.all() and at[-1] - at[0] == len(at) - 1:
        return values.slice(int(at[0]), len(at))
    return values.take(pa.array(np.minimum(at, len(values) - 1), mask=~keep))


def _joined(lists: pa.ListArray, field: str, sep: str) -> pa.Array:
    """Per list: the string ``field`` of its structs joined by ``sep`` (a missing value, or list, as "")."""
    values = pc.fill_null(pc.struct_field(lists.values, field), "")
    return pc.binary_join(pa.ListArray.from_arrays(lists.offsets, values), sep)


def _columns(steps: pa.ListArray) -> dict[str, Any] | None:
    """The frame's columns for the records of ``steps`` (one chunk: each record's list of steps),
    or None to leave the frame to the pure path."""
    flat = pc.list_flatten(steps)
    index = pc.struct_field(flat, "index")
    n = len(flat)
    if index.null_count or pc.struct_field(flat, "reward_components").null_count != n:
        return None  # rubric components (their columns come from the pure path) or a step without index

    # Actions: a step of one item reads that item's fields; longer ones go through describe_action.
    actions = pc.struct_field(flat, "action")
    n_items = pc.fill_null(pc.list_value_length(actions), 0).to_numpy()
    one = n_items == 1
    first = actions.offsets.to_numpy()[:-1]
    items = actions.values

    def field(name: str) -> pa.Array:
        return _taken(pc.struct_field(items, name), first, one)

    kind = pc.fill_null(field("type"), "message")
    if not one.all():  # no item, or several (described below)
        kind = pc.if_else(pa.array(one), kind, "empty")
    is_call = pc.equal(kind, "function_call")
    none = pa.scalar(None, pa.string())
    tool = pc.if_else(is_call, field("name"), none)
    arguments = pc.if_else(is_call, field("arguments"), none)
    content = _taken(pc.struct_field(items, "content"), first, one)
    text = pc.if_else(pc.equal(kind, "message"), _joined(content, "text", ""), none)
    n_calls = is_call.to_numpy(zero_copy_only=False).astype("int64")
    multi = np.flatnonzero(n_items > 1)
    if len(multi):
        described = [describe_action(a) for a in actions.take(pa.array(multi)).to_pylist()]
        mask = pa.array(n_items > 1)

        def replaced(values: pa.Array, position: int) -> pa.Array:
            return pc.replace_with_mask(values, mask, pa.array([d[position] for d in described], pa.string()))

        kind, tool, arguments, text = (replaced(kind, 0), replaced(tool, 1), replaced(arguments, 2), replaced(text, 4))
        n_calls[multi] = [d[3] for d in described]

    # Tool outputs: one output as it is, several joined by newlines, none as null.
    outputs = pc.struct_field(flat, "tool_outputs")
    n_out = pc.fill_null(pc.list_value_length(outputs), 0).to_numpy()
    output = _taken(pc.struct_field(outputs.values, "output"), outputs.offsets.to_numpy()[:-1], n_out == 1)
    if (n_out > 1).any():
        output = pc.if_else(pa.array(n_out > 1), _joined(outputs, "output", "\n"), output)

    def filled(name: str, default: Any) -> pa.Array:
        return pc.fill_null(pc.struct_field(flat, name), default)

    return {
        "records": len(steps),
        "episode": pc.list_parent_indices(steps),  # the record's position in this chunk
        "index": index,
        "kind": kind.dictionary_encode(),
        "tool": tool.dictionary_encode(),
        "arguments": arguments,
        "n_calls": pa.array(n_calls),
        "text": text,
        "output": output,
        "observation": pc.struct_field(flat, "observation") if n else pa.array([], pa.string()),
        "reward": filled("reward", 0.0),
        "terminated": filled("terminated", False),
        "truncated": filled("truncated", False),
        "tool_errors": filled("tool_errors", 0),
        "duration_s": filled("duration_s", 0.0),
    }


def _table_columns(table: pa.Table | None) -> tuple[pa.Table, list] | None:
    if table is None:
        return None
    return table, [_columns(chunk) for chunk in table["steps"].chunks]


def _piece_columns(piece: tuple[pa.Buffer, int, int]) -> tuple[pa.Table, list] | None:
    return _table_columns(_parse(piece, _PARSE))


def steps_frame_arrow(store: Any):
    """The full steps frame of ``store`` (a ``RecordStore``), or None to leave it to the pure path.

    Each worker reads a piece of the records and derives its columns; the first frame keeps the
    Arrow columns it read with the store, and later frames derive theirs from them."""
    if store.columns is not None:
        parts = _parallel(_columns, store.columns["steps"].chunks)
    else:
        ahead = _read_ahead(store)
        if ahead is None:
            return None
        tables, covered = ahead
        work = [(_table_columns, table) for table in tables]  # already read: only their columns
        work += [(_piece_columns, piece) for piece in _pieces(store, covered)]
        done = _parallel(lambda job: job[0](job[1]), work)
        if not done or any(d is None for d in done):
            return None
        store.columns, store.ahead = pa.concat_tables([table for table, _ in done]), None
        parts = [part for _, chunk in done for part in chunk]
    if not parts or any(p is None for p in parts):
        return None

    def chunked(key: str) -> pa.ChunkedArray:
        return pa.chunked_array([p[key] for p in parts])

    def numbers(key: str) -> np.ndarray:  # one copy, into memory pandas may write to
        return np.concatenate([p[key].to_numpy(zero_copy_only=False) for p in parts])

    bases = np.cumsum([0] + [p["records"] for p in parts[:-1]])
    episode = np.concatenate([p["episode"].to_numpy() + b for p, b in zip(parts, bases)])
    return finish_steps(
        episode,
        numbers("index"),
        (chunked("kind"), chunked("tool"), chunked("arguments"), numbers("n_calls"), chunked("text")),
        chunked("output"),
        chunked("observation"),
        numbers("reward"),
        numbers("terminated"),
        numbers("truncated"),
        numbers("tool_errors"),
        numbers("duration_s"),
    )


_SUMMARY = pj.ParseOptions(
    explicit_schema=pa.schema(
        [
            ("reward", pa.float64()),
            ("mask_sample", pa.bool_()),
            ("failure_kind", pa.string()),
            ("steps", pa.list_(pa.struct([("index", pa.int64())]))),
            ("response", pa.struct([("id", pa.string())])),
        ]
    ),
    unexpected_field_behavior="ignore",
)


def summaries_arrow(store: Any) -> list[tuple[float, bool, str | None, int]] | None:
    """(reward, mask_sample, failure_kind, steps) of every record, or None to leave it to orjson."""
    table = _read(store, _SUMMARY)
    if table is None:
        return None
    return list(
        zip(
            pc.fill_null(table["reward"], 0.0).to_pylist(),
            pc.fill_null(table["mask_sample"], False).to_pylist(),
            table["failure_kind"].to_pylist(),
            pc.fill_null(pc.list_value_length(table["steps"]), 0).to_pylist(),
        )
    )
