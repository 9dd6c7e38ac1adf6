"""The driver-side door of a pool (``gymlab serve CONFIG --ray``): one URL per agent answering
``POST /run`` through the cells and ``GET /health`` with the pool's state (docs/cluster.md).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request  # at module level: the route's annotations name Request
from fastapi.responses import JSONResponse

from gymlab._runtime.bodies import BodyGuardMiddleware, parse_json
from gymlab._runtime.serve import LoopServer
from gymlab.errors import ServerError, error_body
from gymlab.server import BaseServer

#: The servers' default body bound (``max_body_bytes``), kept by the door too.
MAX_BODY_BYTES: int = BaseServer.model_fields["max_body_bytes"].default


def front_app(pool: Any, agent: str):
    """A FastAPI app: ``POST /run`` of ``agent`` in ``pool``'s cells, ``GET /health``; a body past
    ``MAX_BODY_BYTES`` is answered 413, one that is not a JSON object 422, as the servers answer them."""
    app = FastAPI(title=f"{agent} on Ray cells")
    app.add_middleware(BodyGuardMiddleware, server_name=agent, max_bytes=MAX_BODY_BYTES)

    @app.post("/run")
    async def run(request: Request) -> Any:
        try:
            job = parse_json(await request.body())
        except (ValueError, RecursionError) as exc:
            cause = "the body is not JSON this door can parse (malformed, or nested too deeply)"
            return _refused(agent, f"{cause}: {type(exc).__name__}")
        if not isinstance(job, dict):
            return _refused(agent, f"the body is a JSON {type(job).__name__}, not an object (a /run row)")
        try:
            return await pool.apost_run(job, agent=agent)
        except ServerError as exc:
            body = error_body(exc.server, exc.route, exc.cause, hint=exc.hint or None, failure=exc.failure)
            return JSONResponse(body, status_code=exc.status or 503)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        cells = pool.cells
        return {
            "status": "ok" if pool.live else "no live cell",
            "agent": agent,
            "cells": len(cells),
            "live": len(pool.live),
            "nodes": len(pool.nodes),
            "in_flight": sum(c.in_flight for c in cells),
            "done": sum(c.done for c in cells),
        }

    return app


def _refused(agent: str, cause: str) -> JSONResponse:
    hint = "send one row of the run as a JSON object, as POST /run of the agent takes it"
    return JSONResponse(error_body(agent, "POST /run", cause, error="RequestValidationError", hint=hint), 422)


def serve_fronts(pool: Any, host: str = "127.0.0.1", port: int = 0) -> dict[str, Any]:
    """One door per agent of ``pool`` (``LoopServer``s on gymlab's loop), ``port`` the first's: agent -> runner."""
    ports = [port] + [0] * (len(pool.agents) - 1)
    return {agent: LoopServer(front_app(pool, agent), host, p, agent).start() for agent, p in zip(pool.agents, ports)}
