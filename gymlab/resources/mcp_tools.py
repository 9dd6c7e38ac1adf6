"""A resources server's tool routes as MCP tools at ``/mcp``, each call in its episode (docs/servers.md)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from starlette.datastructures import Headers
from starlette.responses import JSONResponse
from starlette.routing import Route

from gymlab._http.cookies import cookie_header
from gymlab._http.inproc import LocalApp, call
from gymlab._version import __version__
from gymlab.errors import error_body
from gymlab.loop import refusal
from gymlab.resources.tools import tools_from
from gymlab.server import BaseServer

MCP_PATH = "/mcp"


def require_mcp() -> None:
    """Raise ``ImportError`` naming the install command when the SDK is missing."""
    try:
        import mcp  # noqa: F401
    except ImportError as exc:
        raise ImportError("the 'mcp' package is not installed; install it with `pip install 'gymlab[mcp]'`") from exc


class McpTools:
    """The ``/mcp`` ASGI endpoint of one server; past ``mcp_max_sessions`` the LRU idle sessions end."""

    def __init__(self, server: BaseServer):
        require_mcp()
        from mcp.server.lowlevel import Server

        self.server = server
        self._tools: dict[str, dict[str, Any]] | None = None
        self._manager: Any = None
        self._used: dict[str, None] = {}  # session ids, the least recently used first
        self._busy: dict[str, int] = {}  # session id -> requests in flight
        self._opening = 0  # requests that may open a session, admitted and not yet answered
        self.mcp = Server(
            server.name, version=__version__, on_list_tools=self._list_tools, on_call_tool=self._call_tool
        )

    @property
    def tools(self) -> dict[str, dict[str, Any]]:
        """The rows' function tools by name (read once the app is complete)."""
        if self._tools is None:
            self._tools = {tool["name"]: tool for tool in tools_from(self.server)}
        return self._tools

    def open_sessions(self) -> int:
        """MCP sessions open now (handshake-era clients; a 2026-era request is its own session)."""
        return len(getattr(self._manager, "_server_instances", ()))  # no manager (not running): none

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

        manager = StreamableHTTPSessionManager(
            self.mcp,
            json_response=True,  # one JSON answer per POST: no server-to-client requests are needed
            security_settings=_loopback_only(self.server.host),
            session_idle_timeout=self.server.mcp_session_ttl_seconds,
            max_request_body_size=self.server.max_body_bytes,
            max_sessions=None,  # the cap is this class's, which evicts rather than locks out
        )
        async with manager.run():
            self._manager = manager
            try:
                yield
            finally:
                self._manager = None
                self._used.clear()
                self._busy.clear()

    async def __call__(self, scope, receive, send) -> None:
        manager, method = self._manager, scope.get("method", "GET")
        if manager is None:
            cause = "the MCP session manager is not running (the app was started without its lifespan)"
            hint = "serve the app with uvicorn (lifespan on), a Lab or `gymlab serve`"
            return await self._refusal(scope, 503, cause, hint)(scope, receive, send)
        if method == "GET":  # no server-initiated messages, so no standalone SSE stream: the spec's 405
            cause = "this server sends no messages of its own"
            return await self._refusal(scope, 405, cause, headers={"allow": "POST, DELETE"})(scope, receive, send)
        headers = Headers(scope=scope)
        sid = headers.get("mcp-session-id")
        opens = sid is None and method == "POST" and _handshake_era(headers)
        if opens and not await self._room(manager):
            cause = f"all {self.server.mcp_max_sessions} MCP sessions (mcp_max_sessions) have a request in flight"
            hint = "retry after Retry-After seconds, or raise mcp_max_sessions"
            return await self._refusal(scope, 503, cause, hint, {"retry-after": "1"})(scope, receive, send)
        # an unknown id is the SDK's 404, not tracked
        held = [sid] if sid is not None and sid in manager._server_instances else []
        for s in held:
            self._use(s, 1)
        self._opening += opens

        async def sending(message) -> None:
            nonlocal opens
            if message["type"] == "http.response.start" and opens:  # the new session, if any, is known
                opens = False
                self._opening -= 1
                if opened := Headers(raw=message.get("headers") or []).get("mcp-session-id"):
                    held.append(opened)
                    self._use(opened, 1)
            await send(message)

        try:
            await manager.handle_request(scope, receive, sending if opens else send)
        finally:
            self._opening -= opens
            for s in held:
                self._use(s, -1)

    def _refusal(
        self, scope: Any, status: int, cause: str, hint: str | None = None, headers: dict[str, str] | None = None
    ) -> JSONResponse:
        body = error_body(self.server.name, f"{scope.get('method', 'GET')} {scope['path']}", cause, hint=hint)
        return JSONResponse(body, status_code=status, headers=headers)

    def _use(self, sid: str, in_flight: int) -> None:
        """A request of session ``sid`` starts (1) or ends (-1); the session becomes the most recently used."""
        busy = self._busy.pop(sid, 0) + in_flight
        if busy > 0:
            self._busy[sid] = busy
        self._used.pop(sid, None)
        self._used[sid] = None

    async def _room(self, manager: Any) -> bool:
        """Whether a new session fits under ``mcp_max_sessions``, after ending least recently used idle ones."""
        sessions, cap = manager._server_instances, self.server.mcp_max_sessions
        if len(self._used) > 2 * cap:  # forget sessions the SDK ended (deleted, expired)
            self._used = {sid: None for sid in self._used if sid in sessions}
        # sessions answered so far, plus requests opening one (admitted by the SDK or not yet)
        count = self._opening + sum(1 for sid in sessions if sid in self._used)
        for sid in list(self._used):
            if count < cap:
                break
            transport = sessions.get(sid)
            if transport is None or not self._busy.get(sid):
                self._used.pop(sid, None)
                if transport is not None:
                    count -= 1
                    await manager._discard_session(sid, transport)
        return count < cap

    async def _list_tools(self, ctx: Any, params: Any) -> Any:
        from mcp import types

        return types.ListToolsResult(
            tools=[
                types.Tool(name=name, description=tool.get("description") or None, input_schema=tool["parameters"])
                for name, tool in self.tools.items()
            ]
        )

    async def _call_tool(self, ctx: Any, params: Any) -> Any:
        from mcp import types
        from mcp.shared.exceptions import MCPError

        why = refusal(params.name, list(self.tools))
        if why is not None:
            raise MCPError(types.INVALID_PARAMS, f"{self.server.name}: tools/call: {why}")
        request = ctx.request
        headers = {"content-type": "application/json"}
        if request is not None and (cookie := request.headers.get("cookie")):
            headers["cookie"] = cookie  # the episode session the MCP client brought
        body = json.dumps(params.arguments or {}).encode()
        status, _, answer = await call(self._local(request), "POST", f"/{params.name}", body, headers)
        text = answer.decode("utf-8", "replace")
        try:
            parsed = json.loads(text)
        except ValueError:
            parsed = None
        return types.CallToolResult(
            content=[types.TextContent(text=text)],
            structured_content=parsed if isinstance(parsed, dict) else None,
            is_error=not 200 <= status < 300,
        )

    def _local(self, request: Any) -> LocalApp:
        scope = request.scope if request is not None else {}
        host, port = scope.get("server") or (self.server.host, self.server.port)
        state = dict(scope.get("state") or {})
        return LocalApp(self.server.app, asyncio.get_running_loop(), host, port, self.server.name, state=lambda: state)


def _handshake_era(headers: Headers) -> bool:
    """A request the SDK answers in a session (the 2026 era's requests are sessionless)."""
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS

    version = headers.get("mcp-protocol-version")
    return version is None or version in HANDSHAKE_PROTOCOL_VERSIONS


def _loopback_only(host: str) -> Any:
    """The SDK's DNS-rebinding protection for a server on a loopback address (None elsewhere)."""
    if host not in ("127.0.0.1", "localhost", "::1"):
        return None
    from mcp.server.transport_security import TransportSecuritySettings

    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
    )


def mount_mcp(app: FastAPI, server: BaseServer) -> McpTools:
    """Serve ``server``'s tool routes at ``/mcp`` of ``app``; its ``running()`` is a lifespan part."""
    tools = McpTools(server)
    app.router.routes.append(Route(MCP_PATH, endpoint=tools))
    return tools


@contextlib.asynccontextmanager
async def connect_mcp(url: str, *, cookies: dict[str, str] | None = None, mode: str = "auto") -> AsyncIterator[Any]:
    """An ``mcp.Client`` of ``url`` whose requests carry ``cookies`` (an episode's); ``mode="legacy"``: handshake."""
    require_mcp()
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    headers = {"cookie": cookie_header(cookies) or ""} if cookies else None
    async with create_mcp_http_client(headers=headers) as http:
        async with Client(streamable_http_client(url, http_client=http), mode=mode) as client:
            yield client


def mcp_tools_of(server: BaseServer) -> McpTools | None:
    """The ``McpTools`` serving ``server`` at ``/mcp`` (mounted when its app is built), or None."""
    server.app  # noqa: B018 - the app built: its /mcp mounted
    return getattr(server, "_mcp", None)


__all__ = ["MCP_PATH", "McpTools", "connect_mcp", "mcp_tools_of", "mount_mcp", "require_mcp"]
