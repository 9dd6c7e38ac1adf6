"""A collection's aggregate metrics, per agent: from its resources server when known, else here,
the records streamed past without their bulky fields (docs/collection.md)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import orjson

from gymlab.errors import ServerError
from gymlab.jsonl import dumps

if TYPE_CHECKING:
    from gymlab._http.client import Client

#: Record keys left out of the ``/aggregate_metrics`` request: the bulky ones, and ``agent_ref`` (one agent a request).
LEFT_OUT = frozenset({"steps", "response", "responses_create_params", "agent_ref"})


async def aggregate(
    records: Iterable[dict[str, Any]], metrics_urls: dict[str, str | None], client: Client
) -> dict[str, Any]:
    """Per agent: its resources server's ``/aggregate_metrics`` (the body built as JSON bytes while
    ``records`` stream past, never held as objects), else computed the same way here."""
    from gymlab.resources.simple import MetricsTally

    bodies: dict[str, bytearray] = {}
    tallies: dict[str, MetricsTally] = {}
    for r in records:
        agent = str((r.get("agent_ref") or {}).get("name"))
        if not metrics_urls.get(agent):
            tallies.setdefault(agent, MetricsTally()).add(r)
            continue
        body = bodies.setdefault(agent, bytearray(b"["))
        if len(body) > 1:
            body += b","
        body += dumps({k: v for k, v in r.items() if k not in LEFT_OUT})
    out = {agent: tally.result().model_dump(mode="json") for agent, tally in tallies.items()}
    for agent, body in bodies.items():
        body += b"]"
        payload = {"verify_responses": orjson.Fragment(bytes(body))}
        try:
            out[agent] = await client.post_ok(
                metrics_urls[agent], "/aggregate_metrics", payload, server="resources server"
            )
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
