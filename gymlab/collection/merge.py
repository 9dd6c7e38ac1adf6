"""Shard outputs joined into one collection: ``merge("run.jsonl", "run.1.jsonl", "run.2.jsonl")``; what it
refuses (overlaps, unfinished shards, other inputs, an output it would lose) is in docs/collection.md."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from gymlab.collection.files import Key, key_of, output_paths, sort_key
from gymlab.collection.runner import CollectResult, aggregate, sync_form
from gymlab.errors import DatasetError
from gymlab.jsonl import iter_jsonl, loads, write_atomic, write_jsonl_atomic
from gymlab.protocol.failure_kinds import Failure
from gymlab.protocol.record import mean_reward
from gymlab.run.sinks import failure_row


def _united(files: list[Path], what: str, *, required: bool) -> dict[Key, tuple[dict[str, Any], Path, int]]:
    """key -> (record, file, line) over ``files``; a key seen twice with different content raises."""
    out: dict[Key, tuple[dict[str, Any], Path, int]] = {}
    for path in files:
        if not path.exists():
            if required:
                raise DatasetError(str(path), None, f"no such {what} file (is the shard finished, and named right?)")
            continue
        for line, record in iter_jsonl(path, what=what):
            k = key_of(record)
            if k[0] is None or k[1] is None:
                raise DatasetError(str(path), line, f"a {what} line needs _ng_task_index and _ng_rollout_index")
            if k in out and out[k][0] != record:
                _, first, first_line = out[k]
                raise DatasetError(
                    str(path),
                    line,
                    f"(task {k[0]}, repeat {k[1]}) is also in {first}:{first_line} with different content; "
                    "the shards overlap (collected with different --shard counts, or rerun elsewhere): "
                    "delete one of the two lines, then merge again",
                )
            out.setdefault(k, (record, path, line))
    return out


def _refuse_losing(target: Path, shards: list[Path], merged: dict[Key, tuple[dict[str, Any], Path, int]]) -> None:
    """Raise when writing ``merged`` over an existing ``target`` (not a shard) would lose or change a record."""
    if not target.exists() or any(s.exists() and target.samefile(s) for s in shards):
        return
    for line, record in iter_jsonl(target, what="rollouts"):
        k = key_of(record)
        if k not in merged or merged[k][0] != record:
            what = "is in none of the shards" if k not in merged else f"differs from {merged[k][1]}:{merged[k][2]}"
            raise DatasetError(
                str(target),
                line,
                f"the output exists and its (task {k[0]}, repeat {k[1]}) {what}, so merging would lose it: "
                "choose another output, or pass --force (overwrite=True) to replace it",
            )


def _same_inputs(parts: list[dict[str, Path]]) -> None:
    """Raise when two shards' ``NAME_shard.json`` name different inputs or shard counts (or one is unreadable)."""
    first: tuple[Path, Any] | None = None
    for p in parts:
        if not p["shard"].exists():
            continue
        try:
            record = loads(p["shard"].read_bytes())
            mine = (record["inputs_sha256"], record["shard"][1])
        except (ValueError, TypeError, KeyError, IndexError) as exc:
            raise DatasetError(
                str(p["shard"]), None, f"not a shard record ({exc!r}); collect the shard again"
            ) from None
        if first is None:
            first = (p["shard"], mine)
        elif mine != first[1]:
            raise DatasetError(
                str(p["shard"]),
                None,
                f"this shard was collected from other input rows, options or shard count than {first[0]} "
                f"(inputs_sha256 {str(mine[0])[:12]} of {mine[1]} shards vs {str(first[1][0])[:12]} of "
                f"{first[1][1]}): collect every shard from the same rows and options",
            )


def _unfinished(inputs: dict[Key, tuple[dict[str, Any], Path, int]], done: set[Key], allow: bool) -> dict[Key, dict]:
    """Failure rows of the inputs an unfinished shard never ran (a ``DatasetError`` unless ``allow``)."""
    missing = {k: v for k, v in inputs.items() if k not in done}
    if missing and not allow:
        (_, path, line), k = next(iter(missing.values())), next(iter(missing))
        raise DatasetError(
            str(path),
            line,
            f"(task {k[0]}, repeat {k[1]}) and {len(missing) - 1} more inputs have neither a rollout nor a failure: "
            "the shard's collect did not finish; rerun it to finish, or pass --allow-partial (allow_partial=True) "
            "to merge with those written as failures",
        )
    reason = "the shard's collect stopped before this rollout finished (merged with --allow-partial); rerun it"
    return {
        k: failure_row(row, Failure(kind="cancelled", stage="admission", message=f"{path}: {reason}"), attempts=0)
        for k, (row, path, _) in missing.items()
    }


async def amerge(
    output: str | os.PathLike,
    *shards: str | os.PathLike,
    resources_url: str | None = None,
    overwrite: bool = False,
    allow_partial: bool = False,
) -> CollectResult:
    """Join the outputs of ``collect(..., shard=(i, n))`` runs into ``output`` (see the module doc)."""
    t0 = time.perf_counter()
    if not shards:
        raise DatasetError(str(output), None, "nothing to merge: give the shard outputs (NAME.jsonl) to join")
    parts, paths = [output_paths(s) for s in shards], output_paths(output)
    _same_inputs(parts)
    rollouts = _united([p["rollouts"] for p in parts], "rollouts", required=True)
    if not overwrite:
        _refuse_losing(paths["rollouts"], [p["rollouts"] for p in parts], rollouts)
    inputs = _united([p["materialized_inputs"] for p in parts], "materialized inputs", required=False)
    failures = {  # a later shard's failure wins
        key_of(f): f
        for p in parts
        if p["failures"].exists()
        for _, f in iter_jsonl(p["failures"], what="failures")
        if key_of(f) not in rollouts
    }
    failures.update(_unfinished(inputs, set(rollouts) | set(failures), allow_partial))

    records = sorted((r for r, _, _ in rollouts.values()), key=sort_key)
    failed = sorted(failures.values(), key=sort_key)
    agents = {str((r.get("agent_ref") or {}).get("name")) for r in records}
    from gymlab._http.client import Client

    async with Client() as client:  # no connection pool outlives a caller's short-lived loop
        metrics = await aggregate(records, dict.fromkeys(agents, resources_url), client)
    write_jsonl_atomic(paths["materialized_inputs"], sorted((r for r, _, _ in inputs.values()), key=sort_key))
    write_jsonl_atomic(paths["failures"], failed)
    write_atomic(paths["aggregate_metrics"], json.dumps(metrics, indent=2, default=str))
    paths["shard"].unlink(missing_ok=True)  # the output is a whole collection now, not a shard
    write_jsonl_atomic(paths["rollouts"], records)  # last: the rollouts file says the merge finished
    return CollectResult(
        paths["rollouts"],
        aggregate_metrics=metrics,
        n_new=len(records),
        n_skipped=0,
        n_rollouts=len(records),
        n_failures=len(failed),
        mean_reward=mean_reward(records),
        duration_s=time.perf_counter() - t0,
    )


merge = sync_form(amerge)
