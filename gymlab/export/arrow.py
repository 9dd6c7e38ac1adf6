"""Arrow schemas of the trainer formats (docs/export.md), and Parquet written atomically and read back."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from gymlab.errors import DatasetError
from gymlab.jsonl import atomic_file

#: The formats of one row per episode, whose rows carry ``token_turns`` when the records kept the tokens.
TOKEN_FORMATS = frozenset({"trl-sft", "trl-kto"})


def schema(format_name: str, tokens: bool = False):
    """The ``pyarrow.Schema`` of a trainer format's rows (pyarrow is imported when used); ``tokens``: with
    the ``token_turns`` column (``TOKEN_FORMATS`` only)."""
    import pyarrow as pa

    s, f64, i64 = pa.string(), pa.float64(), pa.int64()
    call = pa.struct([("id", s), ("type", s), ("function", pa.struct([("name", s), ("arguments", s)]))])
    message = pa.struct(
        [("role", s), ("content", s), ("reasoning_content", s), ("tool_calls", pa.list_(call)), ("tool_call_id", s)]
    )
    messages = pa.list_(message)
    prompt, tools = ("prompt", messages), ("tools", s)
    scores = [("score_chosen", f64), ("score_rejected", f64)]
    extra = [("index", i64), ("split", s), ("task_index", i64), tools, ("reward_mean", f64), ("episodes", i64)]
    reward_model = pa.struct([("style", s), ("ground_truth", s)])
    fields = {
        "trl-sft": [("messages", messages), tools],
        "trl-dpo": [prompt, ("chosen", messages), ("rejected", messages), tools, *scores],
        "trl-kto": [prompt, ("completion", messages), ("label", pa.bool_()), tools, ("reward", f64)],
        "trl-grpo": [prompt, ("ground_truth", s), tools, ("reward_mean", f64), ("episodes", i64)],
        "verl": [
            ("data_source", s),
            prompt,
            ("ability", s),
            ("reward_model", reward_model),
            ("extra_info", pa.struct(extra)),
        ],
    }[format_name]
    if tokens and format_name in TOKEN_FORMATS:
        turn = [("prompt_token_ids", pa.list_(i64)), ("generation_token_ids", pa.list_(i64))]
        fields = [*fields, ("token_turns", pa.list_(pa.struct([*turn, ("generation_log_probs", pa.list_(f64))])))]
    return pa.schema(fields)


def table(format_name: str, rows: list[dict[str, Any]]):
    """The rows as a ``pyarrow.Table`` of the format's schema."""
    import pyarrow as pa

    tokens = any(row.get("token_turns") for row in rows)
    return pa.Table.from_pylist(rows, schema=schema(format_name, tokens))


def write_parquet_atomic(path: str | os.PathLike, data) -> Path:
    """Write a table to ``path`` atomically (``gymlab.jsonl.atomic_file``: temp file, fsync, rename)."""
    import pyarrow.parquet as pq

    with atomic_file(path) as f:
        pq.write_table(data, f)
    return Path(path)


def read_parquet(path: str | os.PathLike):
    """A Parquet file as a table; an unreadable, torn or foreign file is a ``DatasetError``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path)
    except OSError as exc:
        raise DatasetError(str(path), None, f"cannot read: {exc.strerror or exc}") from None
    except pa.ArrowException as exc:
        raise DatasetError(
            str(path), None, f"not a readable Parquet file ({exc}); was the write interrupted? export it again"
        ) from None
