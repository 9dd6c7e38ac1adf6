"""A cell's servers reachable from the driver's loop, for an episode pinned to that cell: each gets a
driver-side in-process URL whose requests are forwarded whole to the cell's actor. A dead cell answers
410 ``session_lost`` (docs/cluster.md).
"""

from __future__ import annotations

from typing import Any

import orjson

from gymlab._http.inproc import LocalApp, Registry
from gymlab._runtime.bodies import request_body
from gymlab._sync import background_loop
from gymlab.cluster.cell import CellGone
from gymlab.errors import EpisodeError, error_body
from gymlab.protocol.failure_kinds import Failure

#: Headers the forwarding call sets again itself.
_HOP_HEADERS = frozenset({b"host", b"content-length"})


def bridge_app(cell: Any, server: str):
    """An ASGI app answering every POST by forwarding it to ``server`` in ``cell`` (a ``CellRef``)."""

    async def app(scope: dict, receive, send) -> None:
        body, _ = await request_body(scope, receive)
        headers = {
            k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"] if k.lower() not in _HOP_HEADERS
        }
        path = scope["path"] + (f"?{scope['query_string'].decode()}" if scope.get("query_string") else "")
        try:
            status, answer_headers, body = await cell.call("request", server, path, body, headers)
        except CellGone as exc:
            failure = Failure(kind="session_lost", server=server, status=410, message=str(exc))
            status, answer_headers = 410, [(b"content-type", b"application/json")]
            body = orjson.dumps(
                error_body(server, f"POST {scope['path']}", str(exc), hint="open the episode again", failure=failure)
            )
        await send({"type": "http.response.start", "status": status, "headers": list(answer_headers)})
        await send({"type": "http.response.body", "body": body})

    return app


def bridged_urls(pool: Any, cell: Any, registry: Registry) -> dict[str, str]:
    """Driver-side URLs of ``cell``'s servers, in-process through ``registry`` (a Lab's or a run's
    client's; registered once per cell and registry, dropped when the pool closes)."""
    entries = pool._bridges.setdefault((registry, cell.index), {})
    for server in cell.info.get("urls", {}):
        if server not in entries:
            entry = LocalApp(
                bridge_app(cell, server), background_loop(), f"cell{cell.index}.pool{pool.id}.{server}.ray", 0, server
            )
            registry.register(entry)
            entries[server] = entry
    return {server: entry.url for server, entry in entries.items()}


def pinned(pool: Any, registry: Registry, agent: str | None = None) -> dict[str, Any]:
    """What ``lab.episode(pool, row)`` opens: one cell's environment (and model) URLs and names."""
    agent = agent or pool.agent
    recipe = pool.recipe(agent)
    env, model = recipe.refs.get("resources_server"), recipe.refs.get("model_server")
    if not env:
        raise EpisodeError(f"{pool.name}: the agent {agent!r} has no resources_server; lab.episode needs one")
    cell = pool.pick()
    urls = bridged_urls(pool, cell, registry)
    field = recipe.server.model_fields.get("max_steps")
    max_steps = recipe.config.get("max_steps", field.default if field is not None else None)
    return {
        "cell": cell,
        "env_url": urls[env],
        "env_name": env,
        "model_url": urls.get(model) if model else recipe.config.get("model_server") or None,
        "model_name": model or "",
        "agent_name": agent,
        "max_steps": max_steps,
        "protocol": cell.info.get("protocols", {}).get(env),
    }
