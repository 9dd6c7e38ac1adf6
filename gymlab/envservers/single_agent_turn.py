"""single_agent_turn: one agent turn inside one episode session of a resources server (docs/servers.md)."""

from __future__ import annotations

import json
import uuid
from typing import Any, ClassVar

from fastapi import Body, FastAPI, HTTPException
from pydantic import BaseModel, Field, ValidationError

from gymlab._http.client import Cookies
from gymlab.agents.base import BaseAgent, EpisodeRun, typed
from gymlab.errors import ServerError
from gymlab.loop import EpisodeSession
from gymlab.protocol import (
    RESOURCES_COOKIE_HEADER,
    RESOURCES_SERVER_HEADER,
    EpisodeId,
    Message,
    NeMoGymResponse,
    ResourcesSeedSessionRequest,
    ResponseCreateParams,
    StepRecord,
    TaskId,
)
from gymlab.protocol import record as records
from gymlab.protocol.record import Rollout
from gymlab.protocol.validation import describe_validation

#: Keys of a ``/run`` body that identify the episode rather than belong to the task.
RUN_KEYS = frozenset(
    {"task_id", "task_input", "episode_id", "rollout_id", "attempt", "_ng_task_index", "_ng_rollout_index", "agent_ref"}
)


class Task(BaseModel):
    """A ``/run`` body, normalised: the authored request, the task's own fields, its IDs."""

    responses_create_params: dict[str, Any]
    params: ResponseCreateParams
    task_data: dict[str, Any]
    task_id: TaskId | None
    episode_id: EpisodeId


class EpisodeHandles(BaseModel):
    """What the episode holds of its resources session; enough to invoke the agent again (restore)."""

    resources_server: str
    resources_session_id: str
    episode_id: EpisodeId
    task_id: TaskId | None = None
    cookie: str | None = None
    observation: str | None = None

    def cookies(self) -> Cookies:
        return Cookies.from_header(self.resources_server, self.cookie)


def parse_task(body: dict[str, Any]) -> Task:
    """The task of a ``/run`` body; a malformed one raises ``ValueError`` saying what is wrong."""
    if not isinstance(body, dict):
        raise ValueError(f"a task must be a JSON object, got {type(body).__name__}")
    row = body["task_input"] if "task_input" in body else {k: v for k, v in body.items() if k not in RUN_KEYS}
    if not isinstance(row, dict):
        raise ValueError(f"task_input must be an object (the task's flat row), got {type(row).__name__}")
    if "responses_create_params" not in row:
        raise ValueError(
            "the task has no responses_create_params (send task_id + task_input, or a row "
            "with responses_create_params and task_data)"
        )
    authored = row["responses_create_params"]
    try:
        params = ResponseCreateParams.model_validate(authored)
    except ValidationError as exc:
        raise ValueError(f"responses_create_params: {describe_validation(exc, 'body')}") from None
    try:
        task_id, episode_id = _task_id(body), _episode_id(body)
    except ValidationError as exc:
        raise ValueError(describe_validation(exc, "body")) from None
    task_data = row.get("task_data", {})
    if not isinstance(task_data, dict):
        raise ValueError(f"task_data must be an object, got {type(task_data).__name__}")
    fields = {k: v for k, v in row.items() if k not in ("responses_create_params", "task_data")}
    for key, value in fields.items():
        if key in task_data and task_data[key] != value:
            raise ValueError(
                f"field {key!r} is {json.dumps(value)[:80]} in the row but "
                f"{json.dumps(task_data[key])[:80]} in task_data; give it once, or the same value"
            )
    task_data = {**task_data, **fields}
    return Task(
        responses_create_params=authored, params=params, task_data=task_data, task_id=task_id, episode_id=episode_id
    )


def _task_id(body: dict[str, Any]) -> TaskId | None:
    raw = body.get("task_id", body.get("_ng_task_index"))
    if raw is None:
        return None
    if isinstance(raw, dict):
        return TaskId.model_validate(raw)
    taskset, slash, task = str(raw).partition("/")
    return TaskId(taskset=taskset, task_id=task) if slash else TaskId(task_id=taskset)


def _episode_id(body: dict[str, Any]) -> EpisodeId:
    if isinstance(body.get("episode_id"), dict):
        return EpisodeId.model_validate(body["episode_id"])
    rollout_id = str(body.get("rollout_id") or f"rollout-{uuid.uuid4().hex}")
    return EpisodeId.model_validate({"rollout_id": rollout_id, "attempt": body.get("attempt") or 0})


def agent_request(params: ResponseCreateParams, observation: str | None) -> dict[str, Any]:
    """The agent's request, plus a non-empty observation as one last user message."""
    body = params.model_dump(mode="json", exclude_unset=True)
    if not observation:
        return body
    authored = body.get("input", params.input)
    items = ([_user(authored)] if authored else []) if isinstance(authored, str) else list(authored)
    body["input"] = [*items, _user(observation)]
    return body


def _user(text: str) -> dict[str, Any]:
    return Message(role="user", content=text).model_dump(mode="json", exclude_none=True)


class SingleAgentTurn(BaseAgent):
    """The built-in Environment Server: one agent turn per episode session; a seed refused 409/422 keeps its status."""

    agent_server: str = ""
    agent_timeout_s: float | None = Field(1800.0, gt=0, description="The agent's whole turn.")

    seed_refusals: ClassVar[frozenset[int]] = frozenset({409, 422})

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/run", response_model=Rollout)(self.run)
        return app

    async def run(self, body: dict[str, Any] = Body(...)) -> Rollout:
        """One graded episode: the rollout record (verify answer, one step record), or a typed error."""
        try:
            task = parse_task(body)
        except ValueError as exc:
            raise HTTPException(422, f"{self.name}: invalid task: {exc}") from None

        async def play(run: EpisodeRun) -> Rollout:
            handles = await self.seed(task, run)
            with typed("agent"):
                response = await self.invoke_agent(handles, task.params)
            verify = {
                **task.task_data,
                "responses_create_params": task.responses_create_params,
                "response": response.model_dump(mode="json", exclude_none=True),
                "close_follows": True,  # run_episode closes the session
            }
            result = await self.grade(run, verify, handles.cookies())
            step = StepRecord(
                index=0,
                action=list(response.output),
                info={"observation": handles.observation} if handles.observation else {},
            )
            stop = "max_steps" if response.status == "incomplete" else "final_message"
            return records.verified(result, [step], stop, run.elapsed())

        keys = ("_ng_task_index", "_ng_rollout_index", "agent_ref")
        identity: dict[str, Any] = {k: body[k] for k in keys if k in body}
        row = {**identity, **task.task_data, "responses_create_params": task.responses_create_params}
        return await self.run_episode(row, play)

    async def seed(self, task: Task, run: EpisodeRun | None = None) -> EpisodeHandles:
        """Seed a fresh session for ``task``, held (and closed by ID) from the moment the seed goes out."""
        run = run or EpisodeRun({})
        sid = f"rs-{uuid.uuid4().hex}"
        body = ResourcesSeedSessionRequest(
            resources_session_id=sid, episode_id=task.episode_id, task_id=task.task_id, task_data=task.task_data
        )
        close = _close_body(sid, task.episode_id)
        answer = await self.open_session(run, "/seed_session", body.model_dump(mode="json"), "/close_session", close)
        observation = answer.get("observation") if isinstance(answer, dict) else None
        return EpisodeHandles(
            resources_server=self.resources_server,
            resources_session_id=sid,
            episode_id=task.episode_id,
            task_id=task.task_id,
            cookie=run.cookies.header(self.resources_server),
            observation=observation,
        )

    async def invoke_agent(self, handles: EpisodeHandles, params: ResponseCreateParams) -> NeMoGymResponse:
        """The agent's turn in the episode's session; the header naming the resources server lets it refuse."""
        url, path, server, timeout = self.agent_server, "/v1/responses", "agent server", self.agent_timeout_s
        if not url:
            hint = "set agent_server in the single_agent_turn config"
            raise ServerError(server, f"POST {path}", 0, f"no {server} configured", hint)
        headers = {RESOURCES_SERVER_HEADER: handles.resources_server}
        if handles.cookie:
            headers[RESOURCES_COOKIE_HEADER] = handles.cookie
        body = agent_request(params, handles.observation)
        answer = await self.client.post_ok(url, path, body, server=server, timeout=timeout, headers=headers)
        return NeMoGymResponse.model_validate(answer)

    async def close(self, handles: EpisodeHandles) -> None:
        """Close a restored episode's session (``run`` closes its own, in its life cycle)."""
        session = EpisodeSession(
            self.client,
            handles.resources_server,
            "/close_session",
            server="resources server",
            cookies=handles.cookies(),
            release_body=_close_body(handles.resources_session_id, handles.episode_id),
        )
        await session.send_release(self.timeouts.cleanup)


def _close_body(sid: str, episode_id: EpisodeId) -> dict[str, Any]:
    return {"resources_session_id": sid, "episode_id": episode_id.model_dump(mode="json")}
