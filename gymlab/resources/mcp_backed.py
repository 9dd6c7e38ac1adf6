"""McpResourcesServer: an MCP server's tools served as routes, one MCP session per episode (docs/servers.md)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
from fastapi import Body, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import Field, PrivateAttr

from gymlab._runtime.env import tied
from gymlab._sync import run_sync
from gymlab.errors import ServerStartError
from gymlab.loop import refusal
from gymlab.protocol import (
    SESSION_ID_KEY,
    BaseSeedSessionRequest,
    BaseSeedSessionResponse,
    ResourcesSeedSessionRequest,
)
from gymlab.resources.mcp_tools import connect_mcp, require_mcp
from gymlab.resources.simple import SimpleResourcesServer
from gymlab.resources.tools import function_tool

log = logging.getLogger("gymlab.server")

#: An MCP server: a command line to launch over stdio, or the URL of a streamable HTTP endpoint.
McpTarget = list[str] | str


@contextlib.asynccontextmanager
async def open_mcp(target: McpTarget, *, env: dict[str, str] | None = None) -> AsyncIterator[Any]:
    """A handshake-era ``mcp.Client`` of ``target``: a URL, or a command line run over stdio until exit."""
    require_mcp()
    if isinstance(target, str):
        async with connect_mcp(target, mode="legacy") as client:
            yield client
        return
    if not target:
        raise ValueError("an MCP command line needs at least the program to run")
    from mcp import Client, StdioServerParameters, stdio_client

    command = tied(list(target))  # SIGKILLed if this process dies: the SDK's own stop needs this one alive
    params = StdioServerParameters(command=command[0], args=command[1:], env=env)
    async with Client(stdio_client(params, errlog=_errlog()), mode="legacy") as client:
        yield client


def _errlog() -> Any:
    """An MCP process's stderr: this process's, or the real one when it has no file descriptor (a kernel's)."""
    try:
        sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):
        return sys.__stderr__
    return sys.stderr


def _describe(target: McpTarget) -> str:
    return target if isinstance(target, str) else " ".join(target)


class McpSessionLost(ConnectionError):
    """The episode's MCP session ended before the episode did (its process exited, its server went away)."""


class McpEpisode:
    """One episode's MCP session, held open by its own task; an opening stops by anyio cancel scope."""

    def __init__(self, target: McpTarget, env: dict[str, str] | None = None):
        self.target, self.env, self.client = target, env, None
        self._closing = asyncio.Event()
        self._ready: asyncio.Future = asyncio.get_running_loop().create_future()
        self._task: asyncio.Task | None = None
        self._opening = anyio.CancelScope()

    @property
    def alive(self) -> bool:
        return self._task is not None and not self._task.done() and not self._closing.is_set()

    async def open(self, timeout: float) -> McpEpisode:
        self._task = asyncio.get_running_loop().create_task(self._hold())
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), timeout)
        except BaseException:
            await self.close()
            raise
        return self

    async def _hold(self) -> None:
        try:
            with self._opening:
                async with open_mcp(self.target, env=self.env) as client:
                    self.client = client
                    self._ready.set_result(None)
                    await self._closing.wait()
            if not self._ready.done():
                self._ready.set_exception(McpSessionLost("closed while opening"))
        except asyncio.CancelledError:
            if not self._ready.done():
                self._ready.set_exception(McpSessionLost("cancelled while opening"))
            raise
        except Exception as exc:  # reported to the opener, or logged once the session was open
            if not self._ready.done():
                self._ready.set_exception(exc)
            elif not self._closing.is_set():
                log.warning("MCP session with %s ended: %s", _describe(self.target), _cause(exc))
        finally:
            self.client = None

    async def call(self, name: str, arguments: dict[str, Any]) -> Any:
        client = self.client
        if client is None or not self.alive:
            raise McpSessionLost(f"the MCP session with {_describe(self.target)} has ended")
        return await client.call_tool(name, arguments)

    async def close(self) -> None:
        """End the session (idempotent); waits until the client has left and a process has exited."""
        self._closing.set()
        task = self._task
        if task is None or task is asyncio.current_task():
            return
        if not self._ready.done():  # still opening: stop there rather than wait for the connection
            self._opening.cancel()  # anyio's cancel, which the SDK's shielded stop of its process withstands
        await asyncio.wait({task})  # the caller's own cancellation still reaches it
        if self._ready.done() and not self._ready.cancelled():
            self._ready.exception()  # an opening failure was reported to the opener (or nobody waits)


def _function_tools(tools: list[Any], strict: bool) -> list[dict[str, Any]]:
    """The function tools of the listed MCP tools whose names a model may call."""
    return [
        function_tool(t.name, t.description or "", dict(t.input_schema or {}), strict=strict)
        for t in tools
        if refusal(t.name, [t.name]) is None
    ]


#: Most ``tools/list`` pages and tools one listing reads: past them the MCP server is refused, not followed.
MAX_TOOL_PAGES = 100
MAX_TOOLS = 1000


class _TooManyTools(Exception):
    """Raised when a listing passes ``MAX_TOOL_PAGES`` or ``MAX_TOOLS``."""


async def _list_tools(target: McpTarget, env: dict[str, str] | None, timeout_s: float, who: str) -> list[Any]:
    """Every tool ``target`` lists, within the bounds; else a ``ServerStartError`` naming ``who`` and the cause."""
    try:
        with anyio.fail_after(timeout_s):  # not wait_for: see McpEpisode
            async with open_mcp(target, env=env) as client:
                tools, cursor = [], None
                for _ in range(MAX_TOOL_PAGES):
                    page = await client.list_tools(cursor=cursor) if cursor else await client.list_tools()
                    tools.extend(page.tools)
                    if len(tools) > MAX_TOOLS:
                        raise _TooManyTools(f"it lists more than {MAX_TOOLS} tools")
                    cursor = page.next_cursor
                    if not cursor:
                        return tools
                raise _TooManyTools(f"tools/list still gave a next cursor after {MAX_TOOL_PAGES} pages")
    except Exception as exc:
        if isinstance(_root(exc), _TooManyTools):
            cause, hint = str(_root(exc)), "list fewer tools (a prompt holds each one), in fewer pages"
        else:
            cause = f"no answer within {timeout_s:g}s" if isinstance(exc, TimeoutError) else _cause(exc)
            hint = "check that it runs (or its command starts) and speaks MCP"
        raise ServerStartError(
            f"{who}: could not list the tools of the MCP server {_describe(target)}: {cause}; {hint}"
        ) from exc


def mcp_tools_from(
    target: McpTarget, *, strict: bool = True, env: dict[str, str] | None = None, timeout_s: float = 60.0
) -> list[dict]:
    """The function tools rows declare for an MCP server's tools, listed within ``timeout_s``."""
    return _function_tools(run_sync(_list_tools(target, env, timeout_s, "mcp_tools_from")), strict)


class McpResourcesServer(SimpleResourcesServer):
    """A resources server whose tools are an MCP server's (``mcp_command`` or ``mcp_url``): write ``verify``."""

    mcp_command: list[str] | None = Field(
        default=None, description="An MCP server to launch over stdio, one process per episode."
    )
    mcp_url: str | None = Field(default=None, description="An MCP server's streamable HTTP URL; a session per episode.")
    mcp_env: dict[str, str] | None = Field(default=None, description="The environment of an mcp_command process.")
    mcp_open_timeout_seconds: float = Field(default=60.0, description="How long a seed waits for the MCP session.")
    mcp_call_timeout_seconds: float = Field(default=300.0, description="How long a tool call waits for its answer.")
    mcp_max_processes: int = Field(
        default=32, ge=1, description="Most episodes' MCP sessions (mcp_command: processes) open at once; then 503."
    )

    _mcp_sessions: dict[str, McpEpisode] = PrivateAttr(default_factory=dict)
    _mcp_opening: int = PrivateAttr(default=0)
    _listed: list[Any] | None = PrivateAttr(default=None)

    @property
    def mcp_target(self) -> McpTarget:
        if bool(self.mcp_command) == bool(self.mcp_url):
            raise ValueError(
                f"{self.name}: set exactly one of mcp_command (an MCP server launched over stdio) and mcp_url "
                f"(a streamable HTTP endpoint); got mcp_command={self.mcp_command!r}, mcp_url={self.mcp_url!r}"
            )
        return self.mcp_url or list(self.mcp_command or ())

    @property
    def open_mcp_sessions(self) -> int:
        return len(self._mcp_sessions)

    def setup_webserver(self) -> FastAPI:
        require_mcp()
        self.mcp_target  # noqa: B018 - a misconfigured target fails when the app is built, not at a seed
        app = super().setup_webserver()
        app.post("/{tool}")(self._tool_route)
        return app

    def lifespan_parts(self) -> list[contextlib.AbstractAsyncContextManager]:
        return [*super().lifespan_parts(), self._tools_listed()]

    @contextlib.asynccontextmanager
    async def _tools_listed(self) -> AsyncIterator[None]:
        if self._listed is None:  # the tools, once: rows are checked against them before any seed
            self._listed = await self._list_tools()
        try:
            yield
        finally:
            await asyncio.gather(*(self.close_mcp_session(sid) for sid in list(self._mcp_sessions)))

    async def _list_tools(self) -> list[Any]:
        return await _list_tools(self.mcp_target, self.mcp_env, self.mcp_open_timeout_seconds, self.name)

    def listed_tools(self, *, strict: bool = True) -> list[dict[str, Any]]:
        """The rows' function tools (the MCP server's tools, listed when this server started, or now)."""
        if self._listed is None:
            self._listed = run_sync(self._list_tools())
        return _function_tools(self._listed, strict)

    async def seed_session(
        self, request: Request, body: ResourcesSeedSessionRequest | BaseSeedSessionRequest
    ) -> BaseSeedSessionResponse:
        """Open the episode's MCP session (a subclass that overrides this calls ``super()`` first)."""
        await self.open_mcp_session(request.session[SESSION_ID_KEY])
        return BaseSeedSessionResponse()

    async def open_mcp_session(self, session_id: str) -> McpEpisode:
        """Open ``session_id``'s MCP session (closing one it holds); past ``mcp_max_processes``, a 503 (Retry-After)."""
        await self.close_mcp_session(session_id)
        if (open_ := len(self._mcp_sessions) + self._mcp_opening) >= self.mcp_max_processes:
            raise HTTPException(
                503,
                f"{open_} episodes hold an MCP session, the most this server opens at once (mcp_max_processes); "
                "retry after Retry-After seconds, when one has ended, or raise mcp_max_processes",
                headers={"retry-after": "1"},
            )
        episode = McpEpisode(self.mcp_target, self.mcp_env)
        self._mcp_opening += 1
        try:
            await episode.open(self.mcp_open_timeout_seconds)
        except Exception as exc:
            cause = "no answer in time" if isinstance(exc, TimeoutError) else _cause(exc)
            raise HTTPException(
                502,
                f"could not open an MCP session with {_describe(self.mcp_target)}: {cause}; "
                "check that the MCP server runs (or its command starts) and speaks MCP",
            ) from exc
        finally:
            self._mcp_opening -= 1
        self._mcp_sessions[session_id] = episode
        return episode

    async def close_mcp_session(self, session_id: str) -> None:
        episode = self._mcp_sessions.pop(session_id, None)
        if episode is not None:
            await episode.close()

    async def close_resources_session(self, resources_session_id: str) -> None:
        await self.close_mcp_session(resources_session_id)

    async def _verify_then_release(self, request: Request, call):
        try:
            return await super()._verify_then_release(request, call)
        finally:
            await self.close_mcp_session(request.session[SESSION_ID_KEY])

    async def call_mcp_tool(self, request: Request, name: str, arguments: dict[str, Any] | None = None) -> Any:
        """Call tool ``name`` in the MCP session of ``request``'s episode: the ``CallToolResult``."""
        episode = self._mcp_sessions.get(request.session[SESSION_ID_KEY])
        if episode is None:
            raise HTTPException(404, "no MCP session is open for this episode; POST /seed_session first")
        try:
            return await asyncio.wait_for(episode.call(name, arguments or {}), self.mcp_call_timeout_seconds)
        except TimeoutError:
            raise HTTPException(504, f"the MCP tool {name!r} did not answer in time") from None
        except McpSessionLost as exc:
            raise HTTPException(410, f"{exc}; the episode cannot go on") from None
        except Exception as exc:
            from mcp import types
            from mcp.shared.exceptions import MCPError

            if isinstance(exc, MCPError) and exc.code == types.CONNECTION_CLOSED:
                raise HTTPException(410, f"the MCP session ended during the call ({exc.message})") from None
            if isinstance(exc, MCPError):
                raise HTTPException(422, f"the MCP server refused tools/call {name!r}: {exc.message}") from None
            if not episode.alive:
                raise HTTPException(410, f"the MCP session ended during the call ({_cause(exc)})") from None
            raise

    async def _tool_route(
        self, request: Request, tool: str, body: dict[str, Any] | None = Body(default=None)
    ) -> Response:
        if (why := refusal(tool, [tool])) is not None:
            raise HTTPException(404, why)
        result = await self.call_mcp_tool(request, tool, body)
        text = _text(result)
        if result.is_error:
            raise HTTPException(422, f"the tool {tool!r} failed: {text}")
        if result.structured_content is not None:
            return JSONResponse(result.structured_content)
        return PlainTextResponse(text)


def _text(result: Any) -> str:
    parts = []
    for block in result.content or ():
        text = getattr(block, "text", None)
        parts.append(text if isinstance(text, str) else json.dumps(block.model_dump(mode="json", by_alias=True)))
    return "\n".join(parts)


def _root(exc: BaseException) -> BaseException:
    """The first cause of an exception group from the SDK's task groups (``exc`` itself when not a group)."""
    while inner := getattr(exc, "exceptions", None):
        exc = inner[0]
    return exc


def _cause(exc: BaseException) -> str:
    exc = _root(exc)
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


__all__ = ["McpEpisode", "McpResourcesServer", "McpSessionLost", "mcp_tools_from", "open_mcp"]
