"""OpenEnv environments as GymnasiumServers: an ``Environment`` run in the server (one per episode), or a
running OpenEnv server (one ``GenericEnvClient`` session per episode); the model's text fills the action's
text field, a tool call gives its fields or calls an ``MCPEnvironment``'s tool (docs/envs.md)."""

from __future__ import annotations

import asyncio
import copy
import inspect
import json
import logging
import typing
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from fastapi import HTTPException
from pydantic import Field, PrivateAttr, ValidationError

from gymlab._http.client import fetch
from gymlab.envs.extras import need
from gymlab.envs.gym_env import LOST, plain, row_seed, row_tool, seeded_rows
from gymlab.protocol.responses import read_arguments
from gymlab.resources.gymnasium import GymnasiumServer

log = logging.getLogger("gymlab.server")

_NOT_SHOWN = ("reward", "done", "metadata")


class LocalEpisode:
    """One ``Environment`` on a thread of its own (it may keep thread-bound state), its ``*_async`` on the loop."""

    def __init__(self, env: Any, action_cls: type, executor: ThreadPoolExecutor):
        self.env, self.action_cls, self.executor = env, action_cls, executor

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        from openenv.core.env_server.interfaces import Environment

        own = getattr(type(self.env), f"{name}_async", None)
        if own is not None and own is not getattr(Environment, f"{name}_async"):
            return await getattr(self.env, f"{name}_async")(*args, **kwargs)
        method = getattr(self.env, name)
        return await asyncio.get_running_loop().run_in_executor(self.executor, lambda: method(*args, **kwargs))

    async def reset(self, seed: int | None) -> dict[str, Any]:
        parameters = inspect.signature(self.env.reset).parameters
        takes = any(p.kind == p.VAR_KEYWORD for p in parameters.values()) or "seed" in parameters
        return _serialized(await self._call("reset", **({"seed": seed} if takes and seed is not None else {})))

    async def step(self, action: dict[str, Any]) -> dict[str, Any] | None:
        from openenv.core.env_server.serialization import deserialize_action

        try:
            typed = deserialize_action(action, self.action_cls)
        except ValidationError:
            return None
        return _serialized(await self._call("step", typed))

    async def close(self) -> None:
        try:
            await asyncio.get_running_loop().run_in_executor(self.executor, self.env.close)
        finally:
            self.executor.shutdown(wait=False)


class RemoteEpisode:
    """One session of a running OpenEnv server, over OpenEnv's ``GenericEnvClient`` (its WebSocket)."""

    def __init__(self, url: str, timeout: float, max_message_mb: float):
        from openenv.core.generic_client import GenericEnvClient

        self.client = GenericEnvClient(
            base_url=url, connect_timeout_s=timeout, message_timeout_s=timeout, max_message_size_mb=max_message_mb
        )

    async def reset(self, seed: int | None) -> dict[str, Any]:
        return _result(await self.client.reset(**({"seed": seed} if seed is not None else {})))

    async def step(self, action: dict[str, Any]) -> dict[str, Any] | None:
        try:
            return _result(await self.client.step(action))
        except RuntimeError as exc:  # OpenEnv's client keeps a refused action's error code only in the message
            if str(exc).endswith("(code: VALIDATION_ERROR)"):
                return None
            raise

    async def close(self) -> None:
        await self.client.close()


def _tool_text(observation: dict[str, Any]) -> str:
    """An MCP tool call's observation as the model reads it: the result's text parts, or the error."""
    error, result = observation.get("error"), observation.get("result")
    if error:
        return f"error: {error.get('message') if isinstance(error, dict) else error}"
    parts = result.get("content") if isinstance(result, dict) else None
    if isinstance(parts, list):
        return "\n".join(str(p.get("text", "")) for p in parts if isinstance(p, dict))
    return json.dumps(result)


def _serialized(observation: Any) -> dict[str, Any]:
    from openenv.core.env_server.serialization import serialize_observation

    return plain(serialize_observation(observation))


def _result(result: Any) -> dict[str, Any]:
    return plain({"observation": result.observation, "reward": result.reward, "done": result.done})


def failure(server: OpenEnvServer, exc: BaseException) -> dict[str, Any]:
    """A step's masked info for an environment that timed out, went away, or raised."""
    if isinstance(exc, TimeoutError):
        kind, why = "transport_timeout", f"no answer within {server.timeout_s:g} s"
    elif server.url is not None and not str(exc).startswith("Server error"):  # its error answers start so
        kind, why = "transport_peer_drop", f"the OpenEnv server {server.url} went away: {type(exc).__name__}: {exc}"
    else:
        kind, why = "verifier_error", f"the environment's step raised {type(exc).__name__}: {exc}"
    return {"mask_sample": True, "failure_kind": kind, "failure_reason": f"{server.name}: {why}"[:500]}


class OpenEnvServer(GymnasiumServer):
    """An OpenEnv environment, one instance (or client session) per episode; ``seed`` from the row."""

    url: str | None = Field(None, description="A running OpenEnv server; None: the Environment passed in.")
    action_schema: dict[str, Any] = Field(default_factory=dict, description="The action's JSON schema.")
    text_field: str | None = Field(None, description="The action field the model's text fills (None: JSON text).")
    tool_name: str = Field("act", description="The declared function whose arguments are the action's fields.")
    mcp_tools: list[str] = Field(default_factory=list, description="An MCPEnvironment's tools (calls of them).")
    timeout_s: float = Field(60.0, gt=0, description="Bound on one reset or step of the environment.")
    max_message_mb: float = Field(8.0, gt=0, description="Largest message read from a running OpenEnv server.")
    _factory: Callable[[], Any] | None = PrivateAttr(default=None)
    _action_cls: type | None = PrivateAttr(default=None)
    _formatter: Callable[[dict], str] | None = PrivateAttr(default=None)

    async def open_episode(self) -> LocalEpisode | RemoteEpisode:
        """A fresh environment (in its own thread) or a new session of the running server."""
        need("openenv")
        if self.url is not None:
            remote = RemoteEpisode(self.url, self.timeout_s, self.max_message_mb)
            await remote.client.connect()
            return remote
        if self._factory is None:
            raise HTTPException(422, f"{self.name}: no url and no Environment; build it with gymlab.envs.openenv")
        executor = ThreadPoolExecutor(1, thread_name_prefix=f"gymlab-{self.name}")
        try:
            env = await asyncio.get_running_loop().run_in_executor(executor, self._factory)
        except BaseException:
            executor.shutdown(wait=False)
            raise
        return LocalEpisode(env, self._action_cls, executor)

    def observe(self, observation: dict[str, Any]) -> str:
        """The model's text: your formatter's, else an MCP tool's result (or error), else the fields' JSON."""
        shown = {k: v for k, v in observation.items() if k not in _NOT_SHOWN}
        if self._formatter is not None:
            return self._formatter(shown)
        if "tool_name" in shown and ("result" in shown or "error" in shown):
            return _tool_text(shown)
        return json.dumps(shown, sort_keys=True)

    def read_action(self, calls: list[Any], text: str) -> dict[str, Any] | None:
        """The action's JSON a turn stands for, or None: the first call (an MCP tool's, or the action
        function's arguments), else the text (the text field's value, or a JSON object)."""
        if not calls and self.text_field is not None:
            return {self.text_field: text}
        try:  # not JSON, or nested past reading: unreadable
            value = read_arguments(calls[0].arguments if calls else text or "null", None)
        except ValueError:
            return None
        if not isinstance(value, dict) or not calls:
            return value if isinstance(value, dict) else None
        if calls[0].name in self.mcp_tools:
            return {"type": "call_tool", "tool_name": calls[0].name, "arguments": value}
        return value if calls[0].name == self.tool_name and not self.mcp_tools else None

    async def reset(self, metadata, session_id=None):
        seed = row_seed(self, metadata)
        if self.url is not None and not self.action_schema:  # a YAML config: the url alone
            self.action_schema = (await asyncio.to_thread(get_json, self.url, "/schema"))["action"]
            self.text_field = self.text_field or text_field(self.action_schema)
        episode = await asyncio.wait_for(self.open_episode(), self.timeout_s)
        self.session_state[session_id] = {"episode": episode}  # held first: a failed reset still closes it
        answer = await asyncio.wait_for(episode.reset(seed), self.timeout_s)
        self.session_state[session_id]["observation"] = observation = self.observe(answer["observation"])
        return observation, {}

    async def step(self, action, metadata, session_id=None):
        if (state := self.session_state.get(session_id)) is None:
            return None, 0.0, False, True, LOST
        calls = [item for item in action.output if item.type == "function_call"]
        chosen = self.read_action(calls, action.output_text)
        try:
            answer = None if chosen is None else await asyncio.wait_for(state["episode"].step(chosen), self.timeout_s)
        except Exception as exc:  # the environment's failure: masked, never a 0
            return None, 0.0, False, True, failure(self, exc)
        info: dict[str, Any] = {}
        if answer is None:  # unreadable or refused by the action class: nothing happens
            info["unreadable_action"] = (calls[0].name if calls else action.output_text)[:200]
            if calls:
                info["tool_outputs"] = [
                    self.tool_output(c, {"error": "not an action of this environment"}) for c in calls
                ]
            return state.get("observation"), 0.0, False, False, info
        state["observation"] = observation = self.observe(answer["observation"])
        if calls:
            info["tool_outputs"] = [self.tool_output(calls[0], answer["observation"])]
        return observation, float(answer["reward"] or 0.0), bool(answer["done"]), False, info

    async def close_session(self, session_id: str) -> None:
        state = self.session_state.get(session_id)
        try:
            if state is not None:  # bounded: a step still hung in the environment's thread must not hold it
                await asyncio.wait_for(state["episode"].close(), self.timeout_s)
        except Exception as exc:
            log.warning("%s: closing an episode's environment failed: %s: %s", self.name, type(exc).__name__, exc)
        finally:
            await super().close_session(session_id)


def action_class(env: Any) -> type:
    """The ``Action`` class an environment's ``step`` takes (its annotation), else OpenEnv's ``Action``."""
    from openenv.core.env_server.types import Action

    cls = env if isinstance(env, type) else type(env)
    try:
        hint = typing.get_type_hints(cls.step).get("action")
    except Exception:
        hint = None
    return hint if isinstance(hint, type) and issubclass(hint, Action) else Action


def _fields(schema: dict[str, Any]) -> dict[str, Any]:
    """The action's own properties (OpenEnv's ``metadata`` left out)."""
    return {k: v for k, v in (schema.get("properties") or {}).items() if k != "metadata"}


def text_field(schema: dict[str, Any]) -> str | None:
    """The action's one string field (the one the model's text fills), or None."""
    strings = [k for k, v in _fields(schema).items() if isinstance(v, dict) and v.get("type") == "string"]
    required = [k for k in schema.get("required") or () if k in strings]
    return (required or strings)[0] if len(required or strings) == 1 else None


def get_json(url: str, path: str, *, timeout: float = 30.0, limit: int = 5_000_000) -> Any:
    """``GET url+path``'s JSON, up to ``limit`` bytes; any other answer a ``RuntimeError`` naming it."""
    reply = fetch("GET", url.rstrip("/"), path, timeout=timeout)
    if len(reply.body) > limit:
        raise RuntimeError(f"{url}{path} answered more than {limit} bytes; is it the server you meant?")
    if reply.status != 200:
        raise RuntimeError(f"{url}{path} answered {reply.status}: {reply.body[:200].decode(errors='replace')}")
    try:
        return json.loads(reply.body)
    except ValueError:
        raise RuntimeError(f"{url}{path} answered something that is not JSON") from None


def openenv(
    env: Any,
    *,
    seeds: Iterable[int] = range(4),
    instructions: str | None = None,
    tools: bool = False,
    formatter: Callable[[dict], str] | None = None,
    action: type | None = None,
    name: str | None = None,
) -> tuple[OpenEnvServer, list[dict[str, Any]]]:
    """``(server, rows)``, one row per seed, for an ``Environment`` class or instance or a running OpenEnv
    server's URL (the arguments: docs/envs.md)."""
    need("openenv")
    from openenv.core.env_server.interfaces import Environment
    from openenv.core.env_server.mcp_types import CallToolAction, ListToolsAction

    if isinstance(env, str):
        schema = get_json(env, "/schema")["action"]
        server = OpenEnvServer(name=name or "openenv-remote", url=env.rstrip("/"), action_schema=schema)
        declared: list[dict[str, Any]] = []
        title = env
    else:
        if isinstance(env, type) and issubclass(env, Environment):
            factory = env
        elif isinstance(env, Environment):
            template = copy.deepcopy(env)
            factory = lambda: copy.deepcopy(template)  # noqa: E731
        else:
            raise TypeError(
                f"gymlab.envs.openenv takes an OpenEnv Environment (class or instance) or a server URL, "
                f"not {type(env).__name__}"
            )
        cls = action or action_class(env)
        title = (env if isinstance(env, type) else type(env)).__name__
        server = OpenEnvServer(name=name or f"openenv-{title.lower()}", action_schema=cls.model_json_schema())
        server._factory, server._action_cls = factory, cls
        declared = []
        if issubclass(CallToolAction, cls):  # an MCPEnvironment: its tools, as ListToolsAction lists them
            sample = factory()
            try:
                listed = sample.step(ListToolsAction()).tools
            finally:
                sample.close()
            declared = [
                row_tool(t.name, t.description or "", dict(t.input_schema.get("properties") or {})) for t in listed
            ]
            server.mcp_tools = [t["name"] for t in declared]
    server.text_field = None if server.mcp_tools else text_field(server.action_schema)
    if formatter is not None:
        server._formatter = formatter
    fields = _fields(server.action_schema)
    if not declared:
        declared = [row_tool(server.tool_name, f"Act in {title}.", fields)]
    if server.mcp_tools:
        how = f"a call of one of its tools ({', '.join(server.mcp_tools)})"
    elif server.text_field is not None:
        how = f"your text (it is the action's {server.text_field!r})"
    else:
        how = f"a JSON object of the action's fields ({', '.join(fields)})"
    text = instructions or f"You are acting in the OpenEnv environment {title}. Each turn, answer with {how}."
    return server, seeded_rows(text, seeds, declared if tools or server.mcp_tools else None)


def installed_environments() -> list[str]:
    """The OpenEnv environment packages installed here, as OpenEnv's own discovery finds them."""
    need("openenv")
    from openenv.auto._discovery import get_discovery

    return sorted(get_discovery().discover(use_cache=False))
