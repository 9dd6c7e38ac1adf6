"""Re-grade stored rollouts with a (possibly edited) environment: iterate on a reward, no model calls."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterable
from typing import Any

from gymlab._http.client import Client, Cookies
from gymlab._sync import run_sync
from gymlab.errors import ServerError
from gymlab.lab.handles import ServerHandle
from gymlab.lab.lab import Lab
from gymlab.protocol import FunctionCall, FunctionCallOutput, Rollout
from gymlab.protocol.record import RESULT_KEYS

#: Frame columns and dtypes, one row per stored episode.
DTYPES = {
    "episode": "int64",
    "task": "Int64",
    "repeat": "Int64",
    "old_reward": "float64",
    "new_reward": "float64",
    "delta": "float64",
    "changed": "bool",
    "old_mask_sample": "bool",
    "new_mask_sample": "boolean",
    "new_failure_kind": "category",
    "replay_matches": "boolean",
    "error": "str",
}


def row_of(record: Rollout, rows: dict[Any, dict] | None = None) -> dict[str, Any]:
    """The dataset row a record was run from: its fields minus what the run added, completed from
    ``rows`` (by ``_ng_task_index``) where the verify dropped fields its request model does not declare."""
    data = record.model_dump(mode="json", exclude_none=True)
    row = {k: v for k, v in data.items() if k not in RESULT_KEYS}
    if rows is not None:
        task = row.get("_ng_task_index")
        if task not in rows:
            raise KeyError(
                f"no dataset row for _ng_task_index {task!r} (rows has {len(rows)}); pass the rows the "
                "rollouts were collected from, in the same order"
            )
        row.update({k: v for k, v in rows[task].items() if k not in ("_ng_task_index", "_ng_rollout_index")})
    return row


def rows_by_task(rows: Iterable[dict] | str | None) -> dict[Any, dict] | None:
    """Dataset rows (or a materialized-inputs JSONL path) keyed by ``_ng_task_index`` (else position)."""
    if rows is None:
        return None
    if isinstance(rows, (str, os.PathLike)):
        from gymlab.jsonl import iter_jsonl

        rows = [row for _, row in iter_jsonl(rows)]
    return {row.get("_ng_task_index", n): row for n, row in enumerate(rows)}


def recorded_calls(record: Rollout) -> list[tuple[FunctionCall, str | None]]:
    """Every function call of the episode, in order, with the output recorded for it (if any)."""
    items = [*(o for s in record.steps for o in s.tool_outputs), *record.response.output]
    outputs = {o.call_id: o.output for o in items if isinstance(o, FunctionCallOutput)}
    return [(i, outputs.get(i.call_id)) for i in record.response.output if isinstance(i, FunctionCall)]


async def averify_one(
    client: Client,
    url: str,
    record: Rollout,
    *,
    replay_tools: bool = True,
    server: str = "",
    rows: dict[Any, dict] | None = None,
) -> dict[str, Any]:
    """Seed with the record's row, replay its tool calls in order (a stateful environment grades the state
    they built), verify with the recorded response, all under one cookie; returns the new verify
    answer plus ``replay_matches`` (false when a replayed output differs from the recorded one)."""
    cookies = Cookies()
    row = row_of(record, rows)
    await client.post_ok(url, "/seed_session", row, cookies, server=server)
    matches = True
    if replay_tools:
        for call, recorded in recorded_calls(record):
            try:
                args = json.loads(call.arguments or "{}")
            except ValueError:
                continue  # the loop never sent these to the server either (wire reference)
            reply = await client.post(url, f"/{call.name}", args, cookies, server=server)
            matches = matches and (recorded is None or reply.text == recorded)
    response = record.response.model_dump(mode="json", exclude_none=True)
    answer = await client.post_ok(url, "/verify", {**row, "response": response}, cookies, server=server)
    return {**answer, "replay_matches": matches}


def comparison_frame(records: list[Rollout], answers: list[dict[str, Any] | ServerError]):
    """Old vs new reward per episode as a pandas frame (a failed re-verify has NaN and its error)."""
    cols: dict[str, list] = {c: [] for c in DTYPES}
    for n, (record, answer) in enumerate(zip(records, answers)):
        extra = record.__pydantic_extra__ or {}
        failed = isinstance(answer, ServerError)
        got: dict[str, Any] = {} if isinstance(answer, ServerError) else answer
        new = float("nan") if failed else float(got.get("reward", 0.0))
        cols["episode"].append(n)
        cols["task"].append(extra.get("_ng_task_index"))
        cols["repeat"].append(extra.get("_ng_rollout_index"))
        cols["old_reward"].append(record.reward)
        cols["new_reward"].append(new)
        cols["delta"].append(new - record.reward)
        cols["changed"].append(failed or new != record.reward)
        cols["old_mask_sample"].append(bool(record.mask_sample))
        cols["new_mask_sample"].append(None if failed else bool(got.get("mask_sample", False)))
        cols["new_failure_kind"].append(None if failed else got.get("failure_kind"))
        cols["replay_matches"].append(None if failed else got["replay_matches"])
        cols["error"].append(str(answer) if failed else None)
    import pandas as pd

    from gymlab.lab.frames import typed_frame

    frame = typed_frame(cols, DTYPES)
    # old_<c>, new_<c> and delta_<c> for each rubric component on either side (NaN when absent)
    old = pd.DataFrame([r.reward_components or {} for r in records], index=frame.index, dtype="float64")
    got = [{} if isinstance(a, ServerError) else (a.get("reward_components") or {}) for a in answers]
    new = pd.DataFrame(got, index=frame.index, dtype="float64")
    for name in dict.fromkeys([*old, *new]):
        before, after = old.get(name, float("nan")), new.get(name, float("nan"))
        frame[f"old_{name}"], frame[f"new_{name}"], frame[f"delta_{name}"] = before, after, after - before
    return frame


def reverify(
    environment: Any,
    rollouts: Iterable[Rollout | dict] | str,
    *,
    rows: Any = None,
    replay_tools: bool = True,
    concurrency: int = 8,
    **config: Any,
):
    """Grade stored rollouts again with ``environment``; returns old vs new reward per episode (a frame),
    and old vs new value per rubric component (``old_<c>``, ``new_<c>``, ``delta_<c>``).

    ``environment``: a ``SimpleResourcesServer`` subclass (built with ``config``) or instance, served in a
    background thread (real HTTP, its lifespan run) for the call, or a running server's handle or URL.
    ``rollouts``: a ``Rollouts``, a list of records or a rollouts JSONL path. ``rows`` (the dataset rows, or a
    materialized-inputs JSONL path) restores row fields the stored verify answers dropped. No model is asked."""
    if isinstance(rollouts, (str, os.PathLike)):
        from gymlab.collection.readers import read_jsonl

        rollouts = read_jsonl(rollouts, "rollout")
    records = [r if isinstance(r, Rollout) else Rollout.model_validate(r) for r in rollouts]
    by_task = rows_by_task(rows)

    async def answers(client: Client | None, url: str, server: str) -> list[dict[str, Any] | ServerError]:
        if client is None:  # a URL: a client of its own
            async with Client() as own:
                return await answers(own, url, server)
        sem = asyncio.Semaphore(max(1, concurrency))

        async def one(record: Rollout):
            async with sem:
                try:
                    return await averify_one(
                        client, url, record, replay_tools=replay_tools, server=server, rows=by_task
                    )
                except ServerError as exc:
                    return exc

        return list(await asyncio.gather(*(one(r) for r in records)))

    if isinstance(environment, ServerHandle):
        return comparison_frame(
            records, run_sync(answers(environment.server.client, environment.url, environment.name))
        )
    if isinstance(environment, str):
        return comparison_frame(records, run_sync(answers(None, environment, environment)))
    from gymlab.resources.simple import SimpleResourcesServer

    cls = environment if isinstance(environment, type) else type(environment)
    if not issubclass(cls, SimpleResourcesServer):
        raise TypeError(
            f"reverify grades with a seed/verify environment (a SimpleResourcesServer subclass); "
            f"{cls.__name__} is not one. A Gymnasium environment's rewards come from /step: "
            "step a replay with lab.episode(...) instead"
        )
    with Lab() as lab:
        handle = lab.serve(environment, **config)
        return comparison_frame(records, run_sync(answers(lab.client, handle.url, handle.name)))
