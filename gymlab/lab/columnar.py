"""The steps frame through pyarrow (each record read from its steps key on, in pieces on a thread a core,
its columns derived by Arrow compute), its columns' dtypes, and a message item's text; docs/frames.md."""

from __future__ import annotations

import bisect
import os
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, NoReturn

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from gymlab.jsonl import dumps
from gymlab.protocol.derived_steps import STEPS_KEY, item_text
from gymlab.rewards.columns import add_component_columns

STEP_DTYPES = {
    "episode": "int64",
    "step": "int64",
    "action_type": "category",
    "tool": "category",
    "n_calls": "int64",
    "arguments": "str",
    "output": "str",
    "text": "str",
    "observation": "str",
    "reward": "float64",
    "cumulative_reward": "float64",
    "terminated": "bool",
    "truncated": "bool",
    "tool_errors": "int64",
    "duration_s": "float64",
}
STEP_COLUMNS = list(STEP_DTYPES)


def messages_text(items: list[dict[str, Any]], role: str | None = "assistant") -> str | None:
    """The text of ``items``' messages (of ``role``), one message a line; None when there is none."""
    picked = (item_text(i) for i in items if isinstance(i, dict) and role in (None, i.get("role", "assistant")))
    texts = [t for t in picked if t is not None]
    return "\n".join(texts) if texts else None


def describe_action(items: list[dict[str, Any]]) -> tuple[str, str | None, str | None, int, str | None]:
    """(action type, first tool name, its arguments, number of calls, message text) of a step of several
    items (the steps frame reads a step of one item in Arrow). The type: the one kind of item besides
    reasoning, ``mixed`` (calls and messages) or ``other``."""
    found = {i.get("type", "message") for i in items}
    if len(found) > 1:
        found.discard("reasoning")
    kind = found.pop() if len(found) == 1 else "mixed" if {"function_call", "message"} <= found else "other"
    calls = [i for i in items if i.get("type") == "function_call"]
    first = calls[0] if calls else {}
    return kind, first.get("name"), first.get("arguments"), len(calls), messages_text(items, None)


def _categorical(values: pa.ChunkedArray) -> pd.Categorical:
    """A Categorical with sorted string categories from dictionary chunks; a null stays missing."""
    names = values.unify_dictionaries().to_pandas().array
    return names.set_categories(pd.Index(sorted(names.categories), dtype="str"))


_TEXT_PART = pa.struct([("text", pa.string())])
_ITEM = pa.struct(
    [("type", pa.string()), ("name", pa.string()), ("arguments", pa.string()), ("content", pa.list_(_TEXT_PART))]
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
#: The system allocator: it hands freed pages back when trimmed (pyarrow's default mimalloc keeps them).
_POOL = pa.system_memory_pool()


def _parse(data: Any, longest: int, threads: bool = True, rows: int = -1) -> pa.Table | None:
    """JSON lines read to ``SCHEMA`` (None when a record does not fit it, has no response, or, with
    ``rows``, a line is not one object). A block holds whole records: twice the longest."""
    options = pj.ReadOptions(block_size=max(1 << 24, 2 * longest + 1), use_threads=threads)
    try:
        table = pj.read_json(pa.BufferReader(data), read_options=options, parse_options=_PARSE, memory_pool=_POOL)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return None
    return None if table["response"].null_count or rows not in (-1, table.num_rows) else table


_RESPONSE_KEY = b'"response":'
_CUT = b'{"response":{},'  # what a record cut at its steps key starts with (its response found before)
_SPACE = frozenset(b" \t\r\n")


def _starts_key(buffer: bytes, at: int) -> bool:
    """Whether the quote at ``at`` opens an object's key: the byte before it, past blanks, is ``{`` or ``,``."""
    at -= 1
    while at > 0 and buffer[at] in _SPACE:
        at -= 1
    return at >= 0 and buffer[at] in b"{,"


def _cut(buffer: bytes, starts: list[int], keys: Sequence[int] | None = None) -> bytes:
    """The lines ``buffer[starts[i]:starts[i + 1]]`` as the steps reader is given them: a line whose
    ``"response"`` key comes before its own ``"steps"`` key (``keys[i]``, found when not given) from the
    steps key on, behind ``{"response":{},``; any other line whole (docs/frames.md)."""
    find, view = buffer.find, memoryview(buffer)
    parts: list[bytes | memoryview] = []
    for i, (a, b) in enumerate(zip(starts, starts[1:])):
        at = find(STEPS_KEY, a, b) if keys is None else keys[i]
        response = find(_RESPONSE_KEY, a, at) if at > a else -1
        if response > a and _starts_key(buffer, at) and _starts_key(buffer, response):
            parts += (_CUT, view[at:b])
        else:
            parts.append(view[a:b])
    return b"".join(parts)


def _derived(table: pa.Table | None) -> tuple[pa.Table, list[dict[str, Any]]] | None:
    return None if table is None else (table, [_columns(chunk) for chunk in table["steps"].chunks])


#: Bytes of records cut and read at a time.
_PIECE = 16 << 20


def _read_and_derive(store: Any) -> list[dict[str, Any]]:
    """The frame's columns of every record: pieces cut on this thread, each read and derived on a pool
    of a thread a core, at most two pieces a core ahead; the columns read are kept with the store."""
    first, starts, buffer, keys, n = 0, store.starts, store.buffer, store.steps_keys, len(store)
    longest = (int(np.diff(np.asarray(starts, dtype="int64")).max()) if n else 0) + len(_CUT)

    def read(data: bytes, rows: int) -> tuple[pa.Table, list[dict[str, Any]]] | None:
        return _derived(_parse(pa.py_buffer(data), longest, False, rows))

    workers = os.cpu_count() or 1
    with ThreadPoolExecutor(workers, thread_name_prefix="gymlab-frames") as pool:
        jobs: list[Future] = []
        while first < n:
            last = min(max(first + 1, bisect.bisect_left(starts, starts[first] + _PIECE)), n)
            if len(jobs) >= 2 * workers:
                jobs[-2 * workers].result()  # the pieces cut and not yet read stay few
            data = _cut(buffer, starts[first : last + 1], None if keys is None else keys[first:last])
            jobs.append(pool.submit(read, data, last - first))
            first = last
        done = [job.result() for job in jobs]
    if not done or any(d is None for d in done):
        done = [_derived(_fitted(store))]
    store.columns, store.steps_keys = pa.concat_tables([table for table, _ in done]), None
    return [part for _, parts in done for part in parts]


def _fitted(store: Any) -> pa.Table:
    """The step fields of every record, rewritten to fit the schema: a message's content string
    becomes one text part. A line that is not a rollout record raises ``DatasetError`` with its number."""
    lines = []
    for record in store.dicts():
        steps = record.get("steps")
        for step in steps if isinstance(steps, list) else ():
            action = step.get("action") if isinstance(step, dict) else None
            for item in action if isinstance(action, list) else ():
                if isinstance(item, dict) and isinstance(item.get("content"), str):
                    item["content"] = [{"text": item["content"]}]
        lines.append(dumps({"steps": steps, "response": {}}))
    table = _parse(b"\n".join(lines), max(map(len, lines), default=0))
    if table is None:
        _misfit(store)
    return table


def _misfit(store: Any) -> NoReturn:
    """Raise for records whose steps do not fit the frame: validation names the first bad line."""
    for i in range(len(store)):
        store.record(i)
    raise ValueError("the records' steps do not fit the steps frame (a field of an unexpected type)")


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


def _columns(steps: pa.ListArray) -> dict[str, Any]:
    """The frame's columns for the records of ``steps`` (one chunk: each record's list of steps)."""
    flat = pc.list_flatten(steps)
    n = len(flat)

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
        values = pc.struct_field(flat, name)
        return pc.fill_null(values, default) if values.null_count else values

    return {
        "records": len(steps),
        "episode": pc.list_parent_indices(steps),  # the record's position in this chunk
        "step": pc.struct_field(flat, "index"),
        "action_type": kind.dictionary_encode(),
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
        "rubric": pc.struct_field(flat, "reward_components").null_count != n,
    }


def steps_frame_arrow(store: Any):
    """The full steps frame of ``store`` (a ``RecordStore``); the Arrow columns it reads are kept
    with the store, and later frames derive theirs from them."""
    if store.columns is None and not len(store):
        store.columns = SCHEMA.empty_table()
    if store.columns is None:
        parts = _read_and_derive(store)
    else:
        parts = [_columns(chunk) for chunk in store.columns["steps"].chunks]
    if not parts:
        parts = [_columns(pa.array([], pa.list_(_STEP)))]

    if any(p["step"].null_count for p in parts):  # a step without its index
        _misfit(store)
    bases = np.cumsum([0] + [p["records"] for p in parts[:-1]])
    frame: dict[str, Any] = {"episode": np.concatenate([p["episode"].to_numpy() + b for p, b in zip(parts, bases)])}
    for name, dtype in STEP_DTYPES.items():
        if name in ("episode", "cumulative_reward"):
            continue
        if dtype in ("category", "str"):  # names and texts from Arrow
            values = pa.chunked_array([p[name] for p in parts])
            frame[name] = _categorical(values) if dtype == "category" else pd.array(values, dtype="str")
        else:  # numbers in one copy, into memory pandas may write to
            frame[name] = np.asarray(np.concatenate([p[name].to_numpy(zero_copy_only=False) for p in parts]), dtype)
    rewards = frame["reward"]
    frame["cumulative_reward"] = (
        pd.Series(rewards).groupby(frame["episode"]).cumsum().to_numpy() if len(rewards) else rewards
    )
    frame = pd.DataFrame(frame, columns=STEP_COLUMNS, copy=False)  # the columns are new: no second copy
    if any(p["rubric"] for p in parts):
        components = [s.get("reward_components") for r in store.dicts() for s in r.get("steps") or ()]
        frame = add_component_columns(frame, components)
    return frame
