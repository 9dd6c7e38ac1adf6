"""A task's ground truth for TRL GRPO and verl: by default its row's answer field (``ANSWER_FIELDS``) when
every row has one, else the row's own input fields as a JSON object (docs/export.md)."""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gymlab.errors import ExportError
from gymlab.protocol import Rollout
from gymlab.protocol.record import own_fields

GroundTruth = str | Sequence[str] | Callable[[Rollout], Any] | None
#: Dataset rows: a list of row dicts, or a JSONL path (the dataset, or materialized inputs).
Rows = Iterable[dict[str, Any]] | str | os.PathLike | None

#: A row's answer field, in the order looked for: the default ground truth when every row has one.
ANSWER_FIELDS = ("answer", "expected_answer", "reference_answer", "ground_truth", "solution")


@dataclass
class Inputs:
    """Each task's own input fields (None: no rows given), and where they were read."""

    by_task: dict[Any, dict[str, Any]] | None = None
    where: list[str] = field(default_factory=list)

    @functools.cached_property
    def answer_field(self) -> str | None:
        """The first of ``ANSWER_FIELDS`` every task has."""
        rows = self.by_task or {}
        return next((name for name in ANSWER_FIELDS if rows and all(name in f for f in rows.values())), None)


def sibling_inputs(path: str | os.PathLike) -> Path | None:
    """The materialized inputs a collection wrote beside rollouts file ``path``, when there are any."""
    path = Path(path)
    stem = path.with_suffix("") if path.suffix == ".jsonl" else path
    found = stem.with_name(stem.name + "_materialized_inputs.jsonl")
    return found if found.is_file() else None


def inputs_by_task(sources: list[tuple[str, Rows]]) -> Inputs:
    """Each task's own input fields (by ``_ng_task_index``, else the row's position), from
    ``(where, rows)`` pairs; one task with two different rows is an ``ExportError``."""
    from gymlab.jsonl import iter_jsonl

    out: dict[Any, dict[str, Any]] = {}
    seen: dict[Any, str] = {}
    for where, rows in sources:
        if isinstance(rows, (str, os.PathLike)):
            rows = [row for _, row in iter_jsonl(rows)]
        for position, row in enumerate(rows):
            if not isinstance(row, dict):
                raise ExportError(f"{where}: row {position + 1} is not an object: {row!r:.80}")
            task = row.get("_ng_task_index", position)
            fields = own_fields(row)
            if task in out and out[task] != fields:
                raise ExportError(
                    f"task {task!r} has different input rows in {seen[task]} and {where}; "
                    "export the runs one at a time, or pass rows= or ground_truth="
                )
            out[task], seen[task] = fields, where
    return Inputs(out, [where for where, _ in sources])


def episode_where(record: Rollout) -> str:
    """``record``'s place in its run (task and repeat), for messages."""
    task, repeat = record.task_index, record.repeat
    return f"episode task {task} repeat {repeat}" if task is not None else "episode"


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, sort_keys=True)


def ground_truth_of(record: Rollout, spec: GroundTruth, inputs: Inputs) -> str | None:
    """The task's ground truth as a string (None: a row without fields of its own), as ``spec`` says: a
    field name, several, a function of the record, or None: the default of docs/export.md."""
    if callable(spec):
        return _as_text(spec(record))
    if spec is None:
        rows = inputs.by_task
        if rows is None:
            raise ExportError(
                f"{episode_where(record)}: the default ground truth is the task row's own input fields, and these "
                "records come without their rows; pass rows= (the dataset rows, or the materialized inputs "
                "JSONL a collection writes beside its rollouts) or name the field(s): ground_truth="
            )
        task = record.task_index
        if task not in rows:
            raise ExportError(
                f"{episode_where(record)}: no dataset row for task {task!r} among the {len(rows)} rows given"
            )
        if inputs.answer_field is not None:
            return _as_text(rows[task][inputs.answer_field])
        return _as_text(rows[task]) if rows[task] else None
    fields = own_fields(record.__pydantic_extra__ or {})  # its row's fields and its verifier's echoes
    names = [spec] if isinstance(spec, str) else list(spec)
    missing = [n for n in names if n not in fields]
    if missing:
        raise ExportError(
            f"{episode_where(record)}: no field {missing[0]!r} for the ground truth; the row has "
            f"{', '.join(sorted(fields)) or 'no fields of its own'}"
        )
    if isinstance(spec, str):
        return _as_text(fields[spec])
    return _as_text({n: fields[n] for n in names})


def described(spec: GroundTruth, inputs: Inputs) -> str:
    """What the ground truth is, for the dataset card."""
    if callable(spec):
        return f"{getattr(spec, '__name__', 'a function')}(record)"
    if spec is not None:
        return f"field {spec}" if isinstance(spec, str) else f"fields {', '.join(spec)} (a JSON object)"
    where = ", ".join(inputs.where)
    if inputs.answer_field is not None:
        return (
            f"the task row's `{inputs.answer_field}` field (every row has one), from {where}; "
            "ground_truth=[field, ...] gives a JSON object of several fields"
        )
    names = sorted({k for fields in (inputs.by_task or {}).values() for k in fields})
    return (
        f"the task row's own input fields ({', '.join(names) or 'none: null'}) as a JSON object, "
        f"from {where}; never the verifier's echoes"
    )
