"""Dataset rows: read with line-numbered errors, taskset rows collated, and each row made jobs keyed by
(task, repeat) (docs/collection.md)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from typing import Any

from gymlab.collection.config import deep_merge
from gymlab.collection.files import Key
from gymlab.errors import ConfigError, DatasetError
from gymlab.jsonl import iter_jsonl

#: Where collation looks for a task's own ID, in this order.
ID_FIELDS = ("task_id", "problem_id", "instance_id")

#: Row fields that belong to the collector, not the task: kept outside ``task_input``.
#: (``agent_ref`` is not one: taskset rows route by taskset, so a row's own agent_ref is task data.)
COLLECTOR_FIELDS = frozenset({"_ng_task_index", "_ng_rollout_index", "rollout_id", "attempt", "episode_id"})


def read_rows(rows: str | os.PathLike | Iterable[Any], *, flat: bool | str = True) -> list[dict[str, Any]]:
    """The rows of a dataset JSONL file (blank lines skipped) or of an iterable, each a JSON object (a
    ``DatasetError`` names the line). ``flat=True``: each row needs a valid ``responses_create_params``;
    ``False``: an environment server validates its own input; ``"auto"``: the rows without ``task_input``."""
    from gymlab.collection.readers import task_params

    source = str(rows) if isinstance(rows, (str, os.PathLike)) else "rows"
    out = []
    for number, row in iter_jsonl(rows) if isinstance(rows, (str, os.PathLike)) else enumerate(rows, 1):
        if not isinstance(row, dict):
            raise DatasetError(source, number, f"a row is a JSON object (dict), not {type(row).__name__}")
        if flat is True or (flat == "auto" and "task_input" not in row):
            try:
                task_params(row)
            except ValueError as exc:
                raise DatasetError(source, number, str(exc)) from None
        out.append(row)
    return out


def collate_taskset(
    rows: Iterable[dict[str, Any]], taskset: str, *, start: int = 0, source: str = ""
) -> list[dict[str, Any]]:
    """Flat rows of one taskset dataset as ``task_id``/``task_input`` rows (docs/collection.md: the ID)."""
    out = []
    for position, row in enumerate(rows):
        if "task_input" in row:
            raise DatasetError(
                source,
                None,
                f"row {position} of taskset {taskset!r} is already collated "
                "(has task_input); pass such rows directly with --input",
            )
        own = next((str(row[k]) for k in ID_FIELDS if row.get(k) not in (None, "")), None)
        if own is None:
            own = str(row["_ng_task_index"]) if row.get("_ng_task_index") is not None else str(start + position)
        collated = {k: row[k] for k in row if k in COLLECTOR_FIELDS}
        collated["task_id"] = f"{taskset}/{own}"
        collated["task_input"] = {k: v for k, v in row.items() if k not in COLLECTOR_FIELDS}
        out.append(collated)
    return out


def config_rows(
    config, *, dataset: str | None = None, split: str | None = None, limit: int | None = None
) -> list[dict[str, Any]]:
    """The rows of a config's datasets (``dataset``: by name, ``split``: by type), collated; flat rows get the
    declaring agent's ``agent_ref`` unless they name one; ``limit``: the first rows of each."""
    chosen = [
        d for d in config.datasets if (dataset is None or d.name == dataset) and (split is None or d.type == split)
    ]
    if not chosen:
        known = ", ".join(f"{d.name} ({d.type})" for d in config.datasets) or "none"
        raise ConfigError(
            f"{', '.join(map(str, config.files))}: no dataset matches "
            f"{'name ' + repr(dataset) if dataset else ''}{' type ' + repr(split) if split else ''}; "
            f"datasets: {known}"
        )
    types = {d.type for d in chosen}
    offsets: dict[str, int] = {}
    out: list[dict[str, Any]] = []
    for d in config.datasets:  # every dataset of a chosen type counts toward positional IDs
        if d.type not in types:
            continue
        rows = read_rows(d.jsonl_fpath, flat=d.taskset is None and d in chosen)
        start = offsets.get(d.type, 0)
        offsets[d.type] = start + len(rows)
        if d not in chosen:
            continue
        rows = rows[:limit] if limit is not None else rows
        if d.taskset is not None:
            out.extend(collate_taskset(rows, d.taskset, start=start, source=str(d.jsonl_fpath)))
        else:
            spec = config.servers[d.owner]
            ref = {"type": spec.server_type, "name": spec.instance}
            out.extend(row if "agent_ref" in row else {**row, "agent_ref": ref} for row in rows)
    return out


def iter_expand(
    rows: list[dict[str, Any]],
    repeats: int = 1,
    *,
    responses_create_params: dict | None = None,
    num_repeats_add_seed: bool = False,
) -> Iterator[dict[str, Any]]:
    """Every row ``repeats`` times in "aabbcc" order, keyed, made as they are read; a materialized row
    (with ``_ng_rollout_index``) runs once, as it is."""

    add_seed = num_repeats_add_seed and repeats > 1

    def _base(row: dict[str, Any], r: int) -> dict[str, Any]:
        """The row with the run-level overrides, and ``seed`` in ``metadata.extra_body``, as NeMo Gym does."""
        if not responses_create_params and not add_seed:
            return row
        params = deep_merge(row.get("responses_create_params") or {}, responses_create_params or {})
        if add_seed:
            metadata = dict(params.get("metadata") or {})
            metadata["extra_body"] = json.dumps({**json.loads(metadata.get("extra_body") or "{}"), "seed": r})
            params["metadata"] = metadata
        return {**row, "responses_create_params": params}

    if repeats < 1:
        raise ConfigError(f"repeats must be at least 1, got {repeats}")
    seen: dict[Key, int] = {}  # one key a row: the memory of a run of many repeats is its rows', not its jobs'
    for position, row in enumerate(rows):
        if "task_input" in row and (responses_create_params or num_repeats_add_seed):
            what = "run-level responses_create_params overrides" if responses_create_params else "num_repeats_add_seed"
            raise ConfigError(
                f"row {position + 1} ({row.get('task_id')}): taskset rows refuse {what}; "
                "set response parameters in the source row before collation"
            )
        k = task, repeat = row.get("_ng_task_index", position), row.get("_ng_rollout_index", 0)
        for name, index in (("_ng_task_index", task), ("_ng_rollout_index", repeat)):
            if isinstance(index, bool) or not isinstance(index, int) or index < 0:
                raise DatasetError(
                    "rows",
                    position + 1,
                    f"{name} is a whole number >= 0 (it names the task in every file), got {index!r}",
                )
        if "_ng_rollout_index" in row and repeats != 1:
            raise ConfigError(
                f"row {position + 1} is already materialized (has _ng_rollout_index); "
                "run materialized inputs with repeats=1"
            )
        if k in seen:
            raise DatasetError(
                "rows",
                position + 1,
                f"(task {task}, repeat {repeat}) already comes from row {seen[k] + 1}; "
                "each row needs its own _ng_task_index",
            )
        seen[k] = position
        if "_ng_rollout_index" in row:
            yield dict(row)
        else:
            yield from ({**_base(row, r), "_ng_task_index": task, "_ng_rollout_index": r} for r in range(repeats))
