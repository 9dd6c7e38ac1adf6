"""Rollout records as tidy pandas frames, one row per episode, per step, per tool call, joined by the
``episode`` column; concise by default, every column with ``full=True`` (docs/frames.md)."""

from __future__ import annotations

import ctypes
import gc
import os
from collections.abc import Iterable
from contextlib import contextmanager
from itertools import chain
from typing import Any

import pandas as pd
import pyarrow as pa

from gymlab.jsonl import dumps
from gymlab.lab.columnar import messages_text, steps_frame_arrow
from gymlab.lab.store import RecordStore
from gymlab.protocol.derived_steps import item_text
from gymlab.protocol.record import own_fields
from gymlab.rewards.columns import PREFIX as COMPONENT_PREFIX
from gymlab.rewards.columns import add_component_columns

#: Step columns shown by default (the optional ones only when some step has a value).
STEP_CONCISE = ["episode", "step", "action_type", "tool", "arguments", "output", "text", "observation", "reward"]
STEP_CONCISE += ["cumulative_reward"]
STEP_OPTIONAL = {"tool", "arguments", "output", "text", "observation"}

EPISODE_DTYPES = {
    "episode": "int64",
    "task": "Int64",
    "repeat": "Int64",
    "reward": "float64",
    "prompt": "str",
    "answer": "str",
    "n_steps": "int64",
    "mask_sample": "bool",
    "failure_kind": "category",
    "failure_stage": "category",
    "failure_reason": "str",
    "terminated": "bool",
    "truncated": "bool",
    "duration_s": "float64",
    "input_tokens": "Int64",
    "output_tokens": "Int64",
    "total_tokens": "Int64",
    "model": "category",
    "environment": "category",
    "agent": "category",
}
#: Episode columns shown by default, then the row's own fields; the optional ones only when some
#: episode has a value (``failure_*`` when one failed).
EPISODE_CONCISE = ["episode", "task", "repeat", "reward", "prompt", "answer", "n_steps", "terminated", "truncated"]
EPISODE_CONCISE += ["mask_sample", "failure_kind", "failure_reason", "total_tokens", "environment", "agent"]
EPISODE_OPTIONAL = {"task", "repeat", "prompt", "answer", "failure_kind", "failure_reason", "total_tokens"}
EPISODE_OPTIONAL |= {"environment", "agent"}
CALL_DTYPES = {
    "episode": "int64",
    "step": "int64",
    "call": "int64",
    "tool": "category",
    "call_id": "str",
    "arguments": "str",
    "output": "str",
}
EPISODE_COLUMNS = list(EPISODE_DTYPES)
CALL_COLUMNS = list(CALL_DTYPES)


def typed_frame(cols: dict[str, list], dtypes: dict[str, str]):
    """A DataFrame from column lists, each with its dtype ("category" makes a Categorical)."""
    return pd.DataFrame(
        {
            name: pd.Categorical(cols[name]) if dtype == "category" else pd.array(cols[name], dtype=dtype)
            for name, dtype in dtypes.items()
        },
        columns=list(dtypes),
    )


def store_of(records: Any):
    """The ``RecordStore`` behind ``records``: ``Rollouts``, a store, a rollouts JSONL path, or records."""
    if isinstance(records, RecordStore):
        return records
    if isinstance(records, (str, os.PathLike)):
        return RecordStore.from_file(records)
    store = getattr(records, "store", None)
    return store if isinstance(store, RecordStore) else RecordStore.from_records(records)


def concise(frame, columns: list[str], optional: set[str], extra: Iterable[str] = ()):
    """``frame`` with ``columns`` (an optional one only when some row has a value) and ``extra``."""
    keep = [c for c in columns if c in frame and (c not in optional or frame[c].notna().any())]
    return frame[keep + [c for c in extra if c not in keep]]


@contextmanager
def _building():
    """While a frame is built, the cyclic collector paused; after it, the freed pages handed back (docs/frames.md)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
        pa.default_memory_pool().release_unused()
        if _MALLOC_TRIM is not None:
            _MALLOC_TRIM(0)


try:  # glibc's malloc_trim (None elsewhere)
    _MALLOC_TRIM = getattr(ctypes.CDLL(None), "malloc_trim", None)
except OSError:
    _MALLOC_TRIM = None


@_building()
def steps_frame(records: Any, *, full: bool = False):
    """One row per step: the action, its first tool call, outputs, the assistant's ``text``, per-step
    and cumulative reward (and a ``reward_<name>`` column per rubric component)."""
    frame = steps_frame_arrow(store_of(records))
    extra = [c for c in frame if c.startswith(COMPONENT_PREFIX)]
    return frame if full else concise(frame, STEP_CONCISE, STEP_OPTIONAL, extra=extra)


def prompt_of(params: Any) -> str | None:
    """The prompt of a request: its input string, or its last user message's text (else its last message's)."""
    if not isinstance(params, dict):
        return None
    items = params.get("input")
    if isinstance(items, str):
        return items
    messages = [i for i in items or () if isinstance(i, dict) and i.get("type", "message") == "message"]
    users = [m for m in messages if m.get("role") == "user"]
    last = (users or messages)[-1:]
    return item_text(last[0]) if last else None


def answer_of(record: dict[str, Any]) -> str | None:
    """The final assistant text: the response's messages, else the last step that said something."""
    steps = reversed(record.get("steps") or [])
    actions = chain([(record.get("response") or {}).get("output") or []], (s.get("action") or [] for s in steps))
    return next((text for text in map(messages_text, actions) if text is not None), None)


@_building()
def episodes_frame(records: Any, *, full: bool = False):
    """One row per episode: ids, reward, prompt and answer, steps, failure fields, the row's own fields;
    with ``full=True`` also timing, token usage and the model's name."""
    store = store_of(records)
    cols: dict[str, list] = {c: [] for c in EPISODE_COLUMNS}
    own: list[dict[str, Any]] = []
    components: list[dict | None] = []
    for position, r in enumerate(store.dicts()):
        components.append(r.get("reward_components"))
        usage = (r.get("response") or {}).get("usage") or {}
        steps = r.get("steps") or []
        last = steps[-1] if steps else {}
        terminated, truncated = r.get("terminated"), r.get("truncated")  # the record's own; else its last step's
        agent = r.get("agent_ref")
        agent = agent.get("name") if isinstance(agent, dict) else None
        cols["episode"].append(position)
        cols["task"].append(r.get("_ng_task_index"))
        cols["repeat"].append(r.get("_ng_rollout_index"))
        cols["reward"].append(r.get("reward", 0.0))
        cols["prompt"].append(prompt_of(r.get("responses_create_params")))
        cols["answer"].append(answer_of(r))
        cols["n_steps"].append(len(steps))
        cols["mask_sample"].append(bool(r.get("mask_sample")))
        for key in ("failure_kind", "failure_stage", "failure_reason"):
            cols[key].append(r.get(key))
        cols["terminated"].append(bool(terminated if terminated is not None else last.get("terminated")))
        cols["truncated"].append(bool(truncated if truncated is not None else last.get("truncated")))
        cols["duration_s"].append(r.get("duration_s", 0.0))
        for key in ("input_tokens", "output_tokens", "total_tokens"):
            cols[key].append(usage.get(key))
        cols["model"].append((r.get("response") or {}).get("model") or None)
        cols["environment"].append(r.get("env_name"))
        cols["agent"].append(agent if agent is not None else r.get("agent_name"))
        own.append({k: dumps(v).decode() if isinstance(v, (dict, list)) else v for k, v in own_fields(r).items()})
    frame = add_component_columns(typed_frame(cols, EPISODE_DTYPES), components)
    extra = pd.DataFrame(own, index=frame.index).convert_dtypes()
    extra = extra.rename(columns=lambda k: f"row.{k}" if k in frame else k)
    if len(extra.columns):
        frame = pd.concat([frame, extra], axis=1)
    if full:
        return frame
    rubric = [c for c in frame if c.startswith(COMPONENT_PREFIX)]
    return distinguishing_first(concise(frame, EPISODE_CONCISE, EPISODE_OPTIONAL, extra=[*rubric, *extra]), extra)


def distinguishing_first(frame, fields: Iterable[str]):
    """``frame`` with the row fields that tell its tasks apart (one value per task, several over the run)
    moved next to ``task`` and ``repeat``, where a wide frame shows them."""
    if "task" not in frame or frame["task"].isna().all():
        return frame
    tasks = frame["task"].astype("string")
    early = []
    for c in (c for c in fields if c in frame):
        values = frame[c].astype("string").fillna("<NA>")
        if values.nunique() > 1 and values.groupby(tasks, dropna=False).nunique().max() == 1:
            early.append(c)
    if not early:
        return frame
    ids = [c for c in ("episode", "task", "repeat") if c in frame]
    return frame[[*ids, *early, *(c for c in frame if c not in ids and c not in early)]]


def calls_frame(records: Any):
    """One row per function call, with the output that answered it (matched by ``call_id``)."""
    rows: list[tuple] = []
    for position, r in enumerate(store_of(records).dicts()):
        for s in r.get("steps") or ():
            outputs = {o.get("call_id"): o.get("output") for o in s.get("tool_outputs") or ()}
            calls = [i for i in s.get("action") or () if i.get("type") == "function_call"]
            for n, c in enumerate(calls):
                call_id = c.get("call_id")
                rows.append((position, s["index"], n, c.get("name"), call_id, c.get("arguments"), outputs.get(call_id)))
    return typed_frame({c: [row[k] for row in rows] for k, c in enumerate(CALL_COLUMNS)}, CALL_DTYPES)
