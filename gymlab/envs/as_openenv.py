"""A served gymlab environment as an OpenEnv ``Environment`` for OpenEnv's own server and clients: each session
one episode over HTTP (``/reset`` and ``/step``, or ``/seed_session``, tool routes and ``/verify``); a masked
answer reaches the client as ``masked`` with its failure kind and no reward, never a 0 (docs/envs.md)."""

from __future__ import annotations

import functools
import json
import uuid
from typing import Any, Literal

from gymlab._http.client import Client, Cookies
from gymlab._sync import run_sync
from gymlab.envs.extras import need
from gymlab.envs.open_env import get_json
from gymlab.loop import refusal
from gymlab.protocol import (
    FunctionCall,
    FunctionCallOutput,
    GymnasiumResetResponse,
    GymnasiumStepResponse,
    ResponseCreateParams,
    assistant_message,
)

Protocol = Literal["gymnasium", "seed_verify"]


@functools.cache
def openenv_types() -> tuple[type, type]:
    """``(GymlabAction, GymlabObservation)``: OpenEnv ``Action`` and ``Observation`` classes (made once)."""
    need("openenv")
    from openenv.core.env_server.types import Action, Observation
    from pydantic import Field

    class GymlabAction(Action):
        """The model's turn: its text, or a call of one of the episode's tools."""

        message: str = Field("", max_length=1_000_000, description="The model's text (seed/verify: the answer).")
        tool: str | None = Field(None, max_length=128, description="A tool to call instead of answering.")
        arguments: dict[str, Any] = Field(default_factory=dict, description="The tool call's arguments.")

    class GymlabObservation(Observation):
        """What the model reads next; ``masked`` marks an episode gymlab could not grade (no reward)."""

        text: str = Field("", description="The observation, the prompt or the tool's output.")
        tools: list[str] = Field(default_factory=list, description="The tools the episode declares.")
        masked: bool = Field(False, description="gymlab masked this step (an infrastructure failure).")
        failure_kind: str | None = Field(None, description="Why it was masked (gymlab's failure kinds).")

    return GymlabAction, GymlabObservation


def as_openenv(
    server: Any, rows: list[dict[str, Any]], *, protocol: Protocol | None = None, timeout_s: float = 300.0
) -> tuple[type, type, type]:
    """``(Environment, Action, Observation)`` classes for OpenEnv's ``create_app`` over a served gymlab
    environment (a Lab handle or URL) and its rows: ``reset(task=i, seed=s)`` plays row ``i``."""
    need("openenv")
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.types import State

    rows = [dict(r) for r in rows]
    if not rows:
        raise ValueError("as_openenv needs at least one row")
    url = (server if isinstance(server, str) else server.url).rstrip("/")
    if protocol is None:  # from the server's routes: a Lab handle's app, else its OpenAPI paths
        instance = getattr(server, "server", None)
        paths = [r.path for r in instance.app.routes] if instance else get_json(url, "/openapi.json").get("paths", {})
        protocol = "gymnasium" if "/step" in paths else "seed_verify" if "/verify" in paths else None
        if protocol is None:
            raise ValueError(f"{url} serves neither /step nor /verify; is it a gymlab server?")
    action_cls, observation_cls = openenv_types()
    name = getattr(server, "name", url)
    handed: Client | None = server.server.client if hasattr(server, "server") else None  # a handle's: its Lab's

    class GymlabEnvironment(Environment):
        """One episode of a gymlab server per OpenEnv session."""

        SUPPORTS_CONCURRENT_SESSIONS = True

        def __init__(self) -> None:
            super().__init__()
            self.client = handed or Client()  # its own (a URL's) closed with each episode
            self._cookies: Cookies | None = None
            self._row: dict[str, Any] = {}
            self._declared: list[str] = []
            self._added: list[Any] = []
            self._state = State(episode_id=None, step_count=0)

        @property
        def state(self) -> State:
            return self._state

        def _post(self, path: str, body: Any) -> Any:
            return run_sync(self.client.post_ok(url, path, body, self._cookies, server=name, timeout=timeout_s))

        def reset(self, seed: int | None = None, episode_id: str | None = None, task: int = 0, **kwargs: Any):
            self.close()
            if not (isinstance(task, int) and 0 <= task < len(rows)):
                raise ValueError(f"{name}: task must be a row index 0..{len(rows) - 1}, got {task!r:.40}")
            row = dict(rows[task])
            if seed is not None and protocol == "gymnasium":
                row["seed"] = seed
            self._row, self._added, self._cookies = row, [], Cookies()
            self._state = State(episode_id=episode_id or uuid.uuid4().hex, step_count=0)
            params = ResponseCreateParams.model_validate(row["responses_create_params"])
            self._declared = declared = [t.name for t in params.tools or () if getattr(t, "name", None)]
            if protocol == "gymnasium":
                text = GymnasiumResetResponse.model_validate(self._post("/reset", row)).observation or ""
            else:
                self._post("/seed_session", row)
                users = [i.text for i in params.input_items() if getattr(i, "role", None) == "user"]
                text = users[-1] if users else ""
            return observation_cls(text=text, tools=declared, done=False, reward=None)

        def step(self, action: Any, timeout_s: float | None = None, **kwargs: Any):
            if self._cookies is None:
                raise RuntimeError(f"{name}: no episode is open; reset first (an ended episode needs a new reset)")
            self._state.step_count += 1
            n = self._state.step_count
            if action.tool:
                item = FunctionCall(
                    name=action.tool, arguments=json.dumps(action.arguments), call_id=f"call_{n}", status="completed"
                )
            else:
                item = assistant_message(action.message)
            if protocol == "gymnasium":
                body = {**self._row, "response": {"output": [item.model_dump(mode="json", exclude_none=True)]}}
                answer = GymnasiumStepResponse.model_validate(self._post("/step", body))
                done = answer.terminated or answer.truncated
                if done:
                    self._cookies = None  # a last step releases the episode on the server
                return observation_cls(
                    text=answer.observation or "",
                    done=done,
                    reward=None if answer.mask_sample else answer.reward,
                    masked=answer.mask_sample,
                    failure_kind=answer.failure_kind,
                )
            self._added.append(item)
            if action.tool:
                return observation_cls(text=self._call_tool(item), done=False, reward=0.0)
            response = {"output": [i.model_dump(mode="json", exclude_none=True) for i in self._added]}
            verified = self._post("/verify", {**self._row, "response": response})
            self._cookies = None  # verify released the episode
            masked = bool(verified.get("mask_sample"))
            return observation_cls(
                text=action.message,
                done=True,
                reward=None if masked else float(verified.get("reward", 0.0)),
                masked=masked,
                failure_kind=verified.get("failure_kind"),
            )

        def _call_tool(self, call: Any) -> str:
            """The tool route's answer, as simple_agent gives it to the model (a refused name: an error)."""
            if (why := refusal(call.name, self._declared)) is not None:
                output = json.dumps({"error": why})
            else:
                arguments = json.loads(call.arguments)
                reply = run_sync(self.client.post(url, f"/{call.name}", arguments, self._cookies, name, timeout_s))
                output = reply.text
            self._added.append(FunctionCallOutput(type="function_call_output", call_id=call.call_id, output=output))
            return output

        def close(self) -> None:
            """Release an episode still open on the gymlab server (once)."""
            cookies, self._cookies = self._cookies, None
            if cookies is not None:
                path = "/close" if protocol == "gymnasium" else "/close_session"
                try:
                    run_sync(self.client.post(url, path, {}, cookies, name, timeout_s))
                finally:
                    if handed is None:
                        run_sync(self.client.close())

    GymlabEnvironment.__name__ = GymlabEnvironment.__qualname__ = f"Gymlab{protocol.title().replace('_', '')}Env"
    return GymlabEnvironment, action_cls, observation_cls


def openenv_app(server: Any, rows: list[dict[str, Any]], *, max_concurrent_envs: int = 8, **options: Any) -> Any:
    """OpenEnv's own FastAPI app (``create_app``) serving ``as_openenv(server, rows)``; run it with uvicorn."""
    from openenv.core.env_server.http_server import create_app

    env, action, observation = as_openenv(server, rows, **options)
    name = getattr(server, "name", "gymlab")
    return create_app(env, action, observation, env_name=name, max_concurrent_envs=max_concurrent_envs)
