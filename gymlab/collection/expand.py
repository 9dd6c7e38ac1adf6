"""Dataset rows -> collection jobs: each row checked, then repeated with its (task, repeat) key."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from gymlab.collection.files import Key, key_of
from gymlab.errors import ConfigError, DatasetError


def check_rows(rows: Iterable[dict[str, Any]], source: str = "rows") -> list[dict[str, Any]]:
    """Rows as a list, each a JSON object; flat rows need a valid ``responses_create_params``
    (collated taskset rows, with ``task_input``, are checked by their environment server)."""
    from gymlab.collection.config_rows import check_flat_row

    out = []
    for i, row in enumerate(rows):
        if not isinstance(row, dict):
            raise DatasetError(source, i + 1, f"a row is a JSON object (dict), not {type(row).__name__}")
        if "task_input" not in row:
            check_flat_row(row, source, i + 1)
        out.append(row)
    return out


def iter_expand(
    rows: list[dict[str, Any]],
    repeats: int = 1,
    *,
    responses_create_params: dict | None = None,
    num_repeats_add_seed: bool = False,
) -> Iterator[dict[str, Any]]:
    """Every row ``repeats`` times in "aabbcc" order with ``_ng_task_index`` (its own, else its position)
    and ``_ng_rollout_index``, made as they are read; a row that has ``_ng_rollout_index`` runs once, as
    it is. Taskset rows refuse run-level request overrides and ``num_repeats_add_seed``."""
    from gymlab.collection.config_rows import apply_run_overrides

    def _base(row: dict[str, Any], r: int) -> dict[str, Any]:  # a taskset row has no override: it comes back as is
        return apply_run_overrides(row, responses_create_params, r, num_repeats_add_seed and repeats > 1)

    if repeats < 1:
        raise ConfigError(f"repeats must be at least 1, got {repeats}")
    seen: dict[Key, int] = {}
    for position, row in enumerate(rows):
        if "task_input" in row and (responses_create_params or num_repeats_add_seed):
            what = "run-level responses_create_params overrides" if responses_create_params else "num_repeats_add_seed"
            raise ConfigError(
                f"row {position + 1} ({row.get('task_id')}): taskset rows refuse {what}; "
                "set response parameters in the source row before collation"
            )
        task = row.get("_ng_task_index", position)
        for name, index in (("_ng_task_index", task), ("_ng_rollout_index", row.get("_ng_rollout_index", 0))):
            if isinstance(index, bool) or not isinstance(index, int) or index < 0:
                raise DatasetError(
                    "rows",
                    position + 1,
                    f"{name} is a whole number >= 0 (it names the task in every file), got {index!r}",
                )
        if "_ng_rollout_index" in row:
            if repeats != 1:
                raise ConfigError(
                    f"row {position + 1} is already materialized (has _ng_rollout_index); "
                    "run materialized inputs with repeats=1"
                )
            expanded: Iterable[dict[str, Any]] = [dict(row)]
        else:
            expanded = ({**_base(row, r), "_ng_task_index": task, "_ng_rollout_index": r} for r in range(repeats))
        for job in expanded:
            k = key_of(job)
            # With repeats, no row is materialized: two rows collide when they share a task, so one
            # key a row is enough (the memory of a run of many repeats is its rows', not its jobs').
            if k[1] == 0 or repeats == 1:
                if k in seen:
                    raise DatasetError(
                        "rows",
                        position + 1,
                        f"(task {k[0]}, repeat {k[1]}) already comes from row "
                        f"{seen[k] + 1}; each row needs its own _ng_task_index",
                    )
                seen[k] = position
            yield job
