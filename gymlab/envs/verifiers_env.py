"""A verifiers taskset (``verifiers.v1``) as a seed/verify server: each task a row, verify its own ``score`` of
the episode as a ``Trace``, each ``@vf.tool`` of its toolsets a route (docs/envs.md)."""

from __future__ import annotations

import json
from typing import Any, ClassVar

from fastapi import Body, FastAPI, HTTPException, Request
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, Field, PrivateAttr

from gymlab._sync import run_sync
from gymlab.envs.extras import need
from gymlab.loop import refusal
from gymlab.protocol import (
    SESSION_ID_KEY,
    BaseSeedSessionRequest,
    BaseSeedSessionResponse,
    BaseVerifyRequest,
    BaseVerifyResponse,
    FunctionCall,
    FunctionCallOutput,
    Message,
    ResourcesSeedSessionRequest,
)
from gymlab.resources.simple import SimpleResourcesServer, masked_verification
from gymlab.resources.tools import function_tool


class TaskRef(BaseModel):
    """Which task of the taskset a row is (its position in the taskset's ``load``)."""

    index: int = Field(ge=0)


class VerifiersSeed(BaseSeedSessionRequest):
    verifiers: TaskRef


class VerifiersVerify(BaseVerifyRequest):
    verifiers: TaskRef


class VerifiersServer(SimpleResourcesServer):
    """Seed/verify over a verifiers taskset: the reward is the task's own rubric (its ``@vf.reward``s)."""

    not_episode_state: ClassVar[tuple[str, ...]] = ("_tools", "_listed")  # per task, built once
    _tasks: list[Any] = PrivateAttr(default_factory=list)
    _tools: dict[int, Any] = PrivateAttr(default_factory=dict)
    _listed: dict[int, list[Any]] = PrivateAttr(default_factory=dict)

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/{tool}")(self._tool_route)
        return app

    def task(self, ref: TaskRef) -> Any:
        if ref.index >= len(self._tasks):
            raise HTTPException(
                422,
                f"{self.name}: task {ref.index} is past the taskset's {len(self._tasks)} tasks; make the rows again",
            )
        return self._tasks[ref.index]

    def tool_server(self, index: int) -> Any:
        """The task's toolsets registered, as verifiers registers them, on one in-process MCP server."""
        if index not in self._tools:
            from mcp.server.mcpserver import MCPServer

            task = self._tasks[index]
            server = MCPServer(f"{self.name}-task-{index}")
            for toolset in type(task).toolsets(task.config):
                toolset.register(server)
            self._tools[index] = server
        return self._tools[index]

    def task_tools(self, index: int, *, strict: bool = True) -> list[dict[str, Any]]:
        """The function tools a row of task ``index`` declares: its toolsets' tools as verifiers lists them."""
        listed = self._listed.get(index, [])
        return [function_tool(t.name, t.description or "", dict(t.input_schema or {}), strict=strict) for t in listed]

    def listed_tools(self, *, strict: bool = True) -> list[dict[str, Any]]:
        """Every task's tools (what ``tools_from`` and ``check_rows`` compare rows with)."""
        tools: dict[str, dict[str, Any]] = {}
        for index in range(len(self._tasks)):
            for tool in self.task_tools(index, strict=strict):
                tools.setdefault(tool["name"], tool)
        return list(tools.values())

    async def seed_session(
        self, request: Request, body: VerifiersSeed | ResourcesSeedSessionRequest
    ) -> BaseSeedSessionResponse:
        if isinstance(body, VerifiersSeed):
            self.task(body.verifiers)
            self.session_state[request.session[SESSION_ID_KEY]] = body.verifiers.index
        return BaseSeedSessionResponse()

    async def _tool_route(self, request: Request, tool: str, body: dict[str, Any] | None = Body(default=None)):
        index = self.session_state.get(request.session[SESSION_ID_KEY])
        if index is None:
            raise HTTPException(404, f"{self.name}: no episode holds a task for this session; POST /seed_session first")
        if (why := refusal(tool, [tool])) is not None:
            raise HTTPException(404, why)
        from mcp.server.mcpserver.exceptions import ToolError

        from gymlab.resources.mcp_backed import _text

        try:
            result = await self.tool_server(index).call_tool(tool, body or {})
        except ToolError as exc:  # an unknown tool or arguments its schema refuses: the model's
            raise HTTPException(422, f"{self.name}: /{tool}: {exc}") from None
        except Exception as exc:  # the tool raised: its error is what the model reads
            raise HTTPException(422, f"{self.name}: the tool {tool!r} failed: {exc.__cause__ or exc}") from None
        if getattr(result, "is_error", False):
            raise HTTPException(422, f"{self.name}: the tool {tool!r} failed: {_text(result)}")
        return PlainTextResponse(_text(result))

    async def verify(self, body: VerifiersVerify) -> BaseVerifyResponse:
        task = self.task(body.verifiers)
        trace = episode_trace(task, body.response.output)
        try:
            await task.score(trace)
        except Exception as exc:  # the rubric's own code failed: masked, never a 0
            why = f"{self.name}: the task's rubric raised {type(exc).__name__}: {exc}"[:500]
            return masked_verification(body, "verifier_error", why)
        components = {k: None if r is None else r.value for k, r in trace.rewards.items()}
        return BaseVerifyResponse(**body.model_dump(), reward=float(trace.reward), reward_components=components)


def prompt_messages(data: Any) -> list[Any]:
    """A task's prompt as verifiers messages: its system prompt, then its prompt (text or messages)."""
    from verifiers.v1.types import SystemMessage, UserMessage

    messages: list[Any] = [SystemMessage(content=data.system_prompt)] if data.system_prompt else []
    prompt = data.prompt
    if isinstance(prompt, str):
        messages.append(UserMessage(content=prompt))
    elif prompt:
        messages.extend(prompt)
    return messages


def episode_messages(output: list[Any]) -> list[Any]:
    """A response's items as verifiers messages: a model turn one assistant message, an output a tool message."""
    from verifiers.v1.types import AssistantMessage, ToolCall, ToolMessage

    messages: list[Any] = []
    turn: dict[str, Any] | None = None
    for item in output:
        if isinstance(item, (Message, FunctionCall)):
            if turn is None:
                turn = {"content": [], "calls": []}
                messages.append(turn)
            if isinstance(item, Message):
                turn["content"].append(item.text)
            else:
                turn["calls"].append(ToolCall(id=item.call_id, name=item.name, arguments=item.arguments or "{}"))
        elif isinstance(item, FunctionCallOutput):
            turn = None
            output_text = item.output if isinstance(item.output, str) else json.dumps(item.output)
            messages.append(ToolMessage(tool_call_id=item.call_id, content=output_text))
    return [
        AssistantMessage(content="".join(m["content"]) or None, tool_calls=m["calls"] or None)
        if isinstance(m, dict)
        else m
        for m in messages
    ]


def episode_trace(task: Any, output: list[Any]) -> Any:
    """A verifiers ``Trace`` of one episode: the task's prompt, then the model's turns as sampled nodes."""
    from verifiers.v1.configs.agent import AgentConfig
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.trace import AgentInfo, Trace, TraceTask
    from verifiers.v1.types import AssistantMessage

    messages = prompt_messages(task.data) + episode_messages(output)
    nodes = [
        MessageNode(parent=i - 1 if i else None, message=m, sampled=isinstance(m, AssistantMessage))
        for i, m in enumerate(messages)
    ]
    return Trace(
        task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
        agent=AgentInfo(config=AgentConfig()),
        nodes=nodes,
        is_completed=True,
        ok=True,
    )


def _row_messages(data: Any) -> list[dict[str, Any]]:
    out = []
    for m in prompt_messages(data):
        content = m.content if isinstance(m.content, str) else json.dumps([p.model_dump() for p in m.content])
        out.append({"role": "developer" if m.role == "system" else m.role, "content": content})
    return out


def verifiers(taskset: Any, *, name: str = "verifiers") -> tuple[VerifiersServer, list[dict[str, Any]]]:
    """``(server, rows)`` for a ``vf.Taskset``: a row per task (its prompt, its ``@vf.tool``s declared and
    served as routes), graded by the task's own ``score`` (its ``@vf.reward`` methods, as it weighs them)."""
    need("verifiers")
    from verifiers.v1.taskset import Taskset

    if not isinstance(taskset, Taskset):
        raise TypeError(f"gymlab.envs.verifiers takes a verifiers Taskset, not {type(taskset).__name__}")
    if not taskset.bounded:
        raise ValueError(f"{type(taskset).__name__} is endless; select a bounded part of it first")
    server = VerifiersServer(name=name)
    server._tasks = list(taskset)
    rows = []
    for index, task in enumerate(server._tasks):
        server._listed[index] = run_sync(server.tool_server(index).list_tools())
        params: dict[str, Any] = {"input": _row_messages(task.data)}
        if tools := server.task_tools(index):
            params["tools"] = tools
        rows.append({"responses_create_params": params, "verifiers": {"index": index}})
    return server, rows


def shipped_tasksets() -> list[str]:
    """The tasksets verifiers ships (``verifiers.v1.tasksets``): ``nemo_gym`` plays gymlab's rows."""
    need("verifiers")
    import importlib.util
    import pkgutil

    spec = importlib.util.find_spec("verifiers.v1.tasksets")  # found, not imported
    found = pkgutil.iter_modules(getattr(spec, "submodule_search_locations", None) or [])
    return sorted(m.name for m in found if m.ispkg)
