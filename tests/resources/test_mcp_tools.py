"""A resources server's tool routes over MCP (``serve_mcp``), driven with the official ``mcp`` client
against real uvicorn servers on 127.0.0.1: the rows' schemas, the episode's session, the same errors."""

from __future__ import annotations

import asyncio

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from gymlab import connect_mcp, tools_from
from gymlab.resources.mcp_tools import mcp_tools_of
from gymlab.testing.workers import wait_until


def _run(coro):
    return asyncio.run(coro)


@pytest.fixture
def served(lab, counter):
    return lab.serve(counter.CounterServer, serve_mcp=True)


def _seed(url: str, initial_count: int) -> httpx.Client:
    http = httpx.Client(base_url=url)
    assert http.post("/seed_session", json={"initial_count": initial_count}).status_code == 200
    return http


def test_tools_are_the_rows_tools_and_lifecycle_routes_are_not(served):
    async def listed():
        async with connect_mcp(f"{served.url}/mcp") as client:
            return (await client.list_tools()).tools

    tools = _run(listed())
    rows_tools = tools_from(served.server)
    assert [(t.name, t.description, t.input_schema) for t in tools] == [
        (t["name"], t["description"], t["parameters"]) for t in rows_tools
    ]
    assert [t.name for t in tools] == ["increment"]  # no seed_session, verify, close_session, aggregate_metrics


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_a_call_acts_in_its_episode_and_two_episodes_stay_apart(served, mode):
    first, second = _seed(served.url, 0), _seed(served.url, 10)
    tools = mcp_tools_of(served.server)

    async def calls():
        async with (
            connect_mcp(f"{served.url}/mcp", cookies=dict(first.cookies), mode=mode) as a,
            connect_mcp(f"{served.url}/mcp", cookies=dict(second.cookies), mode=mode) as b,
        ):
            one = await a.call_tool("increment", {"by": 1})
            eleven = await b.call_tool("increment", {"by": 1})
            two = await a.call_tool("increment", {"by": 1})
            held = tools.open_sessions()
        return one, eleven, two, held

    one, eleven, two, held = _run(calls())
    assert (one.structured_content, eleven.structured_content, two.structured_content) == (
        {"count": 1},
        {"count": 11},
        {"count": 2},
    )
    assert not (one.is_error or eleven.is_error or two.is_error)
    assert held == (2 if mode == "legacy" else 0)  # a 2026-era request is its own MCP session
    # the same episode over HTTP sees what the MCP calls did, and grades it
    assert first.post("/increment", json={"by": 1}).json() == {"count": 3}
    assert first.post("/verify", json=_verify(3)).json()["reward"] == 1.0
    assert second.post("/verify", json=_verify(11)).json()["reward"] == 1.0
    wait_until(lambda: tools.open_sessions() == 0, 10, "the MCP sessions closed")
    assert first.get("/health").json()["sessions"]["held"] == 0
    first.close(), second.close()


def test_errors_are_the_routes_errors(served):
    http = _seed(served.url, 0)

    async def calls():
        async with connect_mcp(f"{served.url}/mcp", cookies=dict(http.cookies)) as client:
            bad = await client.call_tool("increment", {"by": "three"})
            refused = []
            for name in ("verify", "seed_session", "close_session", "aggregate_metrics", "nope", "../verify"):
                with pytest.raises(MCPError) as caught:
                    await client.call_tool(name, {})
                refused.append(caught.value.message)
        async with connect_mcp(f"{served.url}/mcp") as stranger:  # no episode cookie
            unseeded = await stranger.call_tool("increment", {"by": 1})
        return bad, refused, unseeded

    bad, refused, unseeded = _run(calls())
    assert bad.is_error
    assert bad.structured_content["route"] == "POST /increment"
    assert "by: Input should be a valid integer" in bad.structured_content["message"]
    assert all("counter_server: tools/call: " in m for m in refused), refused
    assert "tool 'verify' is not callable; declared: increment" in refused[0]
    assert "unknown tool 'nope'" in refused[4]
    assert unseeded.is_error and "call /seed_session first" in unseeded.content[0].text
    assert http.post("/increment", json={"by": 1}).json() == {"count": 0 + 1}  # the refused calls did nothing
    http.close()


def test_malformed_mcp_input_is_a_clear_4xx(served):
    headers = {"accept": "application/json, text/event-stream", "content-type": "application/json"}
    with httpx.Client(base_url=served.url, headers=headers) as http:
        call = b'{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "increment", "arguments": [1]}}'
        malformed = [
            (b"{not json", {}),
            (b"[]", {}),
            (b'"text"', {}),
            (b'{"jsonrpc": "2.0", "id": 1, "method": 7}', {}),
            (b'{"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {"cursor": NaN}}', {}),
            (call, {}),  # no MCP session
            (call, {"mcp-protocol-version": "2026-07-28"}),  # no request envelope
            (call, {"mcp-protocol-version": "bogus"}),
        ]
        for body, extra in malformed:
            answer = http.post("/mcp", content=body, headers=extra)
            assert 400 <= answer.status_code < 500, (body, answer.status_code, answer.text)
            assert answer.json()["error"], answer.text
        bad_init = b'{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": 5}}'
        answer = http.post("/mcp", content=bad_init)  # a JSON-RPC error in a 200, as the spec has it
        assert answer.status_code == 200 and answer.json()["error"]["message"] == "Invalid request parameters"
        assert http.get("/mcp").status_code == 405  # no standalone stream: this server sends nothing unasked
        assert http.get("/health").json()["status"] == "ok"


def test_an_app_started_without_its_lifespan_says_so(counter):
    async def post():
        app = counter.CounterServer(serve_mcp=True).app
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1") as http:
            return await http.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})

    answer = _run(post())
    assert answer.status_code == 503
    assert "the MCP session manager is not running" in answer.json()["detail"]
    assert "serve the app with uvicorn" in answer.json()["hint"]


def test_off_by_default(lab, counter):
    plain = lab.serve(counter.CounterServer)
    assert mcp_tools_of(plain.server) is None
    assert httpx.post(f"{plain.url}/mcp", json={}).status_code == 404


def _verify(target: int) -> dict:
    return {
        "responses_create_params": {"input": [{"role": "user", "content": "count"}]},
        "response": {"output": []},
        "target": target,
    }
