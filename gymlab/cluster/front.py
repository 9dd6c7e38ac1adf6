"""The driver-side door of a pool (``gymlab serve CONFIG --ray``): one URL per agent answering
``POST /run`` through the cells and ``GET /health`` with the pool's state (docs/cluster.md).
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request  # at module level: the route's annotations name Request
from fastapi.responses import JSONResponse

from gymlab.errors import ServerError, error_body


def front_app(pool: Any, agent: str, timeout_s: float | None = None):
    """A FastAPI app: ``POST /run`` of ``agent`` in ``pool``'s cells, ``GET /health``."""
    app = FastAPI(title=f"{agent} on Ray cells")

    @app.post("/run")
    async def run(request: Request) -> Any:
        job = await request.json()
        try:
            return await pool.apost_run(job, agent=agent, timeout=timeout_s)
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


def serve_fronts(pool: Any, host: str = "127.0.0.1", port: int = 0) -> dict[str, Any]:
    """One door per agent of ``pool`` (``LoopServer``s on gymlab's loop): agent -> its runner.
    ``port`` is the first agent's (0: free ports); the next agents take free ports."""
    from gymlab._runtime.serve import LoopServer

    ports = [port] + [0] * (len(pool.agents) - 1)
    return {agent: LoopServer(front_app(pool, agent), host, p, agent).start() for agent, p in zip(pool.agents, ports)}
