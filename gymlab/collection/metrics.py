"""A collection's aggregate metrics, per agent: from its resources server when known, else here.

Each record goes to ``/aggregate_metrics`` as its verify answer's own fields (reward, mask, failure,
identity, the environment's extra fields), without the bulky ``steps``, ``response`` and
``responses_create_params``: the wire reference's ``{"_ng_task_index":0,"_ng_rollout_index":0,
"reward":1.0,...}``, so the request for a large collection stays a small fraction of its file.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import Any

from gymlab.errors import ServerError

#: Record keys left out of the ``/aggregate_metrics`` request (see the module doc).
BULKY = frozenset({"steps", "response", "responses_create_params"})


async def aggregate(records: Iterable[dict[str, Any]], metrics_urls: dict[str, str | None]) -> dict[str, Any]:
    """Per agent: its resources server's ``/aggregate_metrics``, else computed the same way here."""
    from gymlab.client import post_ok
    from gymlab.resources.simple import aggregate_metrics

    by_agent: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        slim = {k: v for k, v in r.items() if k not in BULKY}
        by_agent.setdefault(str((r.get("agent_ref") or {}).get("name")), []).append(slim)
    out = {}
    for agent, rs in by_agent.items():
        url = metrics_urls.get(agent)
        if url:
            try:
                out[agent] = await post_ok(
                    url, "/aggregate_metrics", {"verify_responses": rs}, server="resources server"
                )
                continue
            except ServerError as exc:
                print(
                    f"gymlab collect: {agent}: /aggregate_metrics failed ({exc}); computing the metrics here instead",
                    file=sys.stderr,
                )
        out[agent] = aggregate_metrics(rs).model_dump(mode="json")
    return out
