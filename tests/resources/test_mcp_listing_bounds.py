"""``mcp_tools_from`` (and a McpResourcesServer's start) reads ``tools/list`` within a time budget, a page
count and a tool count: a silent MCP server, one that pages forever or lists thousands of tools is a clear
``ServerStartError``, not a hang. The hostile MCP servers are the official SDK's, served on 127.0.0.1."""

from __future__ import annotations

import asyncio
import itertools
import sys
import time

import pytest

from gymlab import ServerStartError, mcp_tools_from
from gymlab._runtime.serve import LoopServer
from gymlab._sync import background_loop
from gymlab.resources import mcp_backed

mcp = pytest.importorskip("mcp")
from mcp import types  # noqa: E402
from mcp.server.lowlevel import Server  # noqa: E402


def tool(name: str) -> types.Tool:
    return types.Tool(name=name, input_schema={"type": "object", "properties": {}})


def serve_mcp(on_list_tools):
    """A real MCP server over streamable HTTP on 127.0.0.1 whose ``tools/list`` is ``on_list_tools``."""
    app = Server("hostile", on_list_tools=on_list_tools).streamable_http_app(json_response=True)
    return LoopServer(app, wire=True).start()


@pytest.fixture
def served():
    runners = []
    yield lambda handler: runners.append(serve_mcp(handler)) or f"{runners[-1].url}/mcp"
    for runner in runners:
        runner.stop(timeout=5)


def test_a_server_that_pages_forever_is_refused_after_the_page_bound(served):
    pages = itertools.count()

    async def endless(ctx, params):
        page = next(pages)
        return types.ListToolsResult(tools=[tool(f"t{page}")], next_cursor=f"page-{page + 1}")

    url = served(endless)
    with pytest.raises(ServerStartError, match=r"mcp_tools_from: .*next cursor after 100 pages; list fewer tools"):
        mcp_tools_from(url)
    assert next(pages) == mcp_backed.MAX_TOOL_PAGES  # it stopped asking there


def test_a_server_listing_thousands_of_tools_is_refused(served):
    async def crowded(ctx, params):
        return types.ListToolsResult(tools=[tool(f"t{i}") for i in range(mcp_backed.MAX_TOOLS + 1)])

    with pytest.raises(ServerStartError, match=f"more than {mcp_backed.MAX_TOOLS} tools"):
        mcp_tools_from(served(crowded))


def test_a_server_that_never_answers_tools_list_is_refused_within_the_budget(served):
    released = asyncio.Event()

    async def silent(ctx, params):
        await released.wait()  # set only once the client gave up: the server holds the request till then
        return types.ListToolsResult(tools=[])

    url = served(silent)
    started = time.monotonic()
    try:
        with pytest.raises(ServerStartError, match=rf"tools of the MCP server {url}: no answer within 1s; check"):
            mcp_tools_from(url, timeout_s=1.0)
        assert time.monotonic() - started < 30  # bounded, whatever the machine's load
    finally:
        background_loop().call_soon_threadsafe(released.set)


def test_a_command_that_never_speaks_mcp_is_refused_within_the_budget():
    silent = [sys.executable, "-c", "import sys; sys.stdin.read()"]  # reads, never answers the handshake
    with pytest.raises(ServerStartError, match="no answer within 1s; check that it runs"):
        mcp_tools_from(silent, timeout_s=1.0)


def test_a_paged_listing_within_the_bounds_is_read_whole(served):
    async def paged(ctx, params):
        page = int(params.cursor if params and params.cursor else "0")
        more = {"next_cursor": str(page + 1)} if page < 4 else {}
        return types.ListToolsResult(tools=[tool(f"page{page}_{i}") for i in range(3)], **more)

    names = [t["name"] for t in mcp_tools_from(served(paged))]
    assert names == [f"page{p}_{i}" for p in range(5) for i in range(3)]
