"""The steps frame through pyarrow: the records' JSON read into Arrow columns, and Arrow compute.

The fast path of ``gymlab.lab.frames.steps_frame`` (the ``fast`` extra): pyarrow's JSON reader
parses only the step fields the frame shows, in C++ on every core, and the columns are derived
without a Python call per step (steps of more than one item, rare, are described in Python).
Records whose JSON does not fit the schema (a message whose content is a string, a field of
another type) return None, and the pure-Python path builds the frame; both give the same frame.
"""

from __future__ import annotations

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
    ]
)
SCHEMA = pa.schema([("steps", pa.list_(_STEP)), ("response", pa.struct([("id", pa.string())]))])
_PARSE = pj.ParseOptions(explicit_schema=SCHEMA, unexpected_field_behavior="ignore")


def _read(store: Any, parse: pj.ParseOptions) -> pa.Table | None:
    """The records read with ``parse`` (None when one does not fit its schema). A block holds whole
    records, so it is at least twice the longest one."""
    starts = store.starts
    longest = max((b - a for a, b in zip(starts, starts[1:])), default=0)
    options = pj.ReadOptions(block_size=max(1 << 24, 2 * longest + 1))
    try:
        return pj.read_json(pa.BufferReader(store.buffer), read_options=options, parse_options=parse)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None


def read_steps(store: Any) -> pa.Table | None:
    """The step fields of every record (None when a record does not fit the schema)."""
    return _read(store, _PARSE)


def _starts(lists: pa.ListArray) -> np.ndarray:
    """Each list's first position in ``lists.values``."""
    return lists.offsets.to_numpy()[:-1]


def _joined(lists: pa.ListArray, field: str, sep: str) -> pa.Array:
    """Per list: the string ``field`` of its structs joined by ``sep`` (a missing value as "")."""
    values = pc.fill_null(pc.struct_field(lists.values, field), "")
    return pc.binary_join(pa.ListArray.from_arrays(lists.offsets, values), sep)


def _pick(values: pa.Array, at: np.ndarray, keep: np.ndarray) -> pa.Array:
    """``values[at]`` where ``keep``, else null."""
    if len(values) == 0:
        return pa.nulls(len(at), values.type)
    taken = values.take(pa.array(np.minimum(at, len(values) - 1)))
    return pc.if_else(pa.array(keep), taken, pa.scalar(None, values.type))


def steps_frame_arrow(store: Any):
    """The full steps frame of ``store`` (a ``RecordStore``), or None to leave it to the pure path."""
    table = store.columns
    if table is None:
        table = read_steps(store)
        if table is None or table.num_rows != len(store) or table["response"].null_count:
            return None
        store.columns = table
    steps = table["steps"].combine_chunks()
    lengths = pc.fill_null(pc.list_value_length(steps), 0).to_numpy()
    flat = pc.list_flatten(steps)
    index = pc.struct_field(flat, "index")
    if index.null_count:
        return None

    # Actions: a step of one item reads that item's fields; longer ones go through describe_action.
    actions = pc.struct_field(flat, "action")
    if not isinstance(actions, pa.ListArray):
        actions = actions.cast(pa.list_(_ITEM))
    n_items = pc.fill_null(pc.list_value_length(actions), 0).to_numpy()
    first = _starts(actions)
    one = n_items == 1
    items = actions.values
    item_type = pc.fill_null(pc.struct_field(items, "type"), "message")
    is_call = pc.equal(item_type, "function_call")
    is_message = pc.equal(item_type, "message")
    text = pc.if_else(is_message, _joined(pc.struct_field(items, "content"), "text", ""), None)
    name = pc.if_else(is_call, pc.struct_field(items, "name"), None)
    arguments = pc.if_else(is_call, pc.struct_field(items, "arguments"), None)
    kind = pc.if_else(pa.array(one), _pick(item_type, first, one), "empty")
    columns = {
        "kind": kind,
        "tool": _pick(name, first, one),
        "arguments": _pick(arguments, first, one),
        "text": _pick(text, first, one),
    }
    n_calls = np.where(one, _pick(is_call, first, one).fill_null(False).to_numpy(zero_copy_only=False), 0)
    multi = np.flatnonzero(n_items > 1)
    if len(multi):
        described = [describe_action(a) for a in actions.take(pa.array(multi)).to_pylist()]
        mask = pa.array(n_items > 1)
        for position, key in enumerate(("kind", "tool", "arguments")):
            columns[key] = pc.replace_with_mask(
                columns[key], mask, pa.array([d[position] for d in described], pa.string())
            )
        columns["text"] = pc.replace_with_mask(columns["text"], mask, pa.array([d[4] for d in described], pa.string()))
        n_calls[multi] = [d[3] for d in described]

    # Tool outputs: one output as it is, several joined by newlines, none as null.
    outputs = pc.struct_field(flat, "tool_outputs")
    n_out = pc.fill_null(pc.list_value_length(outputs), 0).to_numpy()
    single = _pick(pc.struct_field(outputs.values, "output"), _starts(outputs), n_out == 1)
    output = pc.if_else(pa.array(n_out > 1), _joined(outputs, "output", "\n"), single)

    def filled(field: str, default: Any) -> np.ndarray:
        return pc.fill_null(pc.struct_field(flat, field), default).to_numpy(zero_copy_only=False)

    episode = np.repeat(np.arange(len(lengths), dtype="int64"), lengths)
    return finish_steps(
        episode,
        index.to_numpy(),
        (columns["kind"], columns["tool"], columns["arguments"], n_calls, columns["text"]),
        output,
        pc.struct_field(flat, "observation"),
        filled("reward", 0.0),
        filled("terminated", False),
        filled("truncated", False),
        filled("tool_errors", 0),
        filled("duration_s", 0.0),
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
    if table is None or table.num_rows != len(store) or table["response"].null_count:
        return None
    return list(
        zip(
            pc.fill_null(table["reward"], 0.0).to_pylist(),
            pc.fill_null(table["mask_sample"], False).to_pylist(),
            table["failure_kind"].to_pylist(),
            pc.fill_null(pc.list_value_length(table["steps"]), 0).to_pylist(),
        )
    )
