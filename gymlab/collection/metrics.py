"""A collection's aggregate metrics, per agent: from its resources server when known, else here.

Each record goes to ``/aggregate_metrics`` as its verify answer's own fields (reward, mask, failure,
task and repeat, the environment's extra fields), without the bulky ``steps``, ``response`` and
``responses_create_params``: the wire reference's ``{"_ng_task_index":0,"_ng_rollout_index":0,
"reward":1.0,...}``, so the request for a large collection stays a small fraction of its file.
An agent without a metrics URL (no resources server, or one in this process whose metrics are the
default) gets its metrics tallied here as the records stream past: nothing of them is held.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

import orjson

from gymlab.errors import ServerError
from gymlab.jsonl import dumps

#: Record keys left out of the ``/aggregate_metrics`` request (see the module doc); ``agent_ref``
#: too, as each request is one agent's.
LEFT_OUT = frozenset({"steps", "response", "responses_create_params", "agent_ref"})


async def aggregate(records: Iterable[dict[str, Any]], metrics_urls: dict[str, str | None]) -> dict[str, Any]:
    """Per agent: its resources server's ``/aggregate_metrics``, else computed the same way here.

    Each asked agent's request body is built as JSON bytes while ``records`` stream past (a file read
    a line at a time), so the records are never held as objects here."""
    from gymlab.client import post_ok
    from gymlab.resources.simple import MetricsTally

    bodies: dict[str, bytearray] = {}
    tallies: dict[str, MetricsTally] = {}
    for r in records:
        agent = str((r.get("agent_ref") or {}).get("name"))
        if not metrics_urls.get(agent):
            tallies.setdefault(agent, MetricsTally()).add(r)
            continue
        body = bodies.get(agent)
        if body is None:
            body = bodies[agent] = bytearray(b"[")
        elif len(body) > 1:
            body += b","
        body += dumps({k: v for k, v in r.items() if k not in LEFT_OUT})
    out = {agent: tally.result().model_dump(mode="json") for agent, tally in tallies.items()}
    for agent, body in bodies.items():
        body += b"]"
        payload = {"verify_responses": orjson.Fragment(bytes(body))}
        try:
            out[agent] = await post_ok(metrics_urls[agent], "/aggregate_metrics", payload, server="resources server")
            continue
        except ServerError as exc:
            print(
                f"gymlab collect: {agent}: /aggregate_metrics failed ({exc}); computing the metrics here instead",
                file=sys.stderr,
            )
        tally = MetricsTally()
        for r in orjson.loads(body):
            tally.add(r)
        out[agent] = tally.result().model_dump(mode="json")
    return out
