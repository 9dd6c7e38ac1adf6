"""A collection's aggregate metrics, per agent: from its resources server when known, else here."""

from __future__ import annotations

import sys
from typing import Any

from gymlab.errors import ServerError


async def aggregate(records: list[dict[str, Any]], metrics_urls: dict[str, str | None]) -> dict[str, Any]:
    """Per agent: its resources server's ``/aggregate_metrics``, else computed the same way here."""
    from gymlab.client import post_ok
    from gymlab.resources.simple import aggregate_metrics

    by_agent: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by_agent.setdefault(str((r.get("agent_ref") or {}).get("name")), []).append(r)
    out = {}
    for agent, rs in by_agent.items():
        url = metrics_urls.get(agent)
        if url:
            body = {"verify_responses": [{k: v for k, v in r.items() if k != "steps"} for r in rs]}
            try:
                out[agent] = await post_ok(url, "/aggregate_metrics", body, server="resources server")
                continue
            except ServerError as exc:
                print(
                    f"gymlab collect: {agent}: /aggregate_metrics failed ({exc}); computing the metrics here instead",
                    file=sys.stderr,
                )
        out[agent] = aggregate_metrics(rs).model_dump(mode="json")
    return out


def _progress_bar(total: int, initial: int, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, initial=initial, desc=desc, unit="rollout", dynamic_ncols=True)
