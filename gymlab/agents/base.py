"""What every agent server shares: the run-request body, the model call, the HTTP client's lifetime."""

from __future__ import annotations

import contextlib
from typing import Any

from fastapi import FastAPI, HTTPException
from pydantic import ConfigDict

from gymlab.client import close_http_session, post_ok
from gymlab.errors import ServerError
from gymlab.protocol import BaseRunRequest, NeMoGymResponse
from gymlab.server import BaseServer


class AgentRunRequest(BaseRunRequest):
    """A dataset row: ``responses_create_params`` validated, every other field kept."""

    model_config = ConfigDict(extra="allow")


class BaseAgent(BaseServer):
    """An agent server bound to a model server (and usually a resources server), by URL."""

    model_server: str = ""
    max_steps: int | None = None

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()

        @contextlib.asynccontextmanager
        async def lifespan(_app):
            yield
            await close_http_session()

        app.router.lifespan_context = lifespan
        return app

    async def call_model(self, body: dict) -> NeMoGymResponse:
        if not self.model_server:
            raise ServerError(self.name, "POST /v1/responses", 0, "no model_server configured",
                              "pass model= to serve_agent or set model_server in the config")
        return NeMoGymResponse.model_validate(
            await post_ok(self.model_server, "/v1/responses", body, server="model server")
        )


def upstream_failure(agent: str, exc: ServerError) -> HTTPException:
    """An upstream server's error as this agent's 502, naming both."""
    return HTTPException(status_code=502, detail=f"{agent}: {exc}")


def dump_row(body: AgentRunRequest) -> dict[str, Any]:
    """The whole row as sent to seed/verify/reset/step: every field, params fully dumped."""
    row = body.model_dump(mode="json", exclude={"responses_create_params"})
    row["responses_create_params"] = body.responses_create_params.model_dump(mode="json", exclude_none=True)
    return row


def session_lost(row: dict[str, Any], exc: ServerError, duration_s: float) -> dict[str, Any]:
    """The masked rollout of an episode whose resources session is gone (HTTP 410, e.g. a dead worker)."""
    return {**row, "response": NeMoGymResponse(output=[]).model_dump(mode="json", exclude_none=True),
            "reward": 0.0, "mask_sample": True, "failure_kind": "session_lost", "failure_reason": str(exc),
            "steps": [], "duration_s": duration_s}
