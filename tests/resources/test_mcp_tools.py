"""A resources server's tool routes over MCP (``serve_mcp``), driven with the official ``mcp`` client
against real uvicorn servers on 127.0.0.1: the rows' schemas, the episode's session, the same errors."""

from __future__ import annotations

import asyncio
import copy
import json
import threading

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from gymlab import connect_mcp, function_call, tools_from
from gymlab.examples import example_rows
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


INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "flood", "version": "0"}},
}
MCP_HEADERS = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


def test_a_flood_of_initialize_requests_never_locks_out_a_new_client(lab, counter):
    cap = 8
    served = lab.serve(counter.CounterServer, serve_mcp=True, mcp_max_sessions=cap)
    tools = mcp_tools_of(served.server)

    async def flood(n: int) -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=served.url, headers=MCP_HEADERS) as http:
            return await asyncio.gather(*(http.post("/mcp", json=INITIALIZE) for _ in range(n)))

    # concurrent, 4 times the cap: a request finding every session still opening waits its turn (503, Retry-After)
    burst = _run(flood(4 * cap))
    assert {r.status_code for r in burst} <= {200, 503} and sum(r.status_code == 200 for r in burst) >= cap
    assert all(r.headers["retry-after"] == "1" for r in burst if r.status_code == 503)
    assert tools.open_sessions() <= cap
    # one after another, 4 times the cap: each ends the least recently used idle session, none is refused
    with httpx.Client(base_url=served.url, headers=MCP_HEADERS) as http:
        serial = [http.post("/mcp", json=INITIALIZE) for _ in range(4 * cap)]
    assert [r.status_code for r in serial] == [200] * 4 * cap
    ids = [r.headers["mcp-session-id"] for r in serial]
    assert len(set(ids)) == 4 * cap and tools.open_sessions() <= cap
    with httpx.Client(base_url=served.url, headers=MCP_HEADERS) as http:
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        evicted = http.post("/mcp", json=ping, headers={"mcp-session-id": ids[0], "mcp-protocol-version": "2025-06-18"})
        assert evicted.status_code == 404  # the oldest flood session was ended to make room

    http = _seed(served.url, 0)  # a fresh official client still connects and works in its episode

    async def call():
        async with connect_mcp(f"{served.url}/mcp", cookies=dict(http.cookies), mode="legacy") as client:
            return await client.call_tool("increment", {"by": 2}), tools.open_sessions()

    result, held = _run(call())
    assert result.structured_content == {"count": 2} and not result.is_error
    assert held <= cap
    http.close()


def test_past_the_cap_with_every_session_busy_is_503_with_retry_after(lab, counter):
    entered, gate = threading.Event(), threading.Event()

    class Slow(counter.CounterServer):
        def setup_webserver(self):
            app = super().setup_webserver()

            @app.post("/wait")
            async def wait() -> dict:
                """Answer once the test opens the gate."""
                entered.set()
                await asyncio.get_running_loop().run_in_executor(None, gate.wait, 60)
                return {"ok": True}

            return app

    served = lab.serve(Slow, serve_mcp=True, mcp_max_sessions=1)

    async def run():
        async with connect_mcp(f"{served.url}/mcp", mode="legacy") as holder:
            waiting = asyncio.ensure_future(holder.call_tool("wait", {}))
            reached = await asyncio.get_running_loop().run_in_executor(None, entered.wait, 60)
            assert reached, "the held call never reached /wait"  # the one session has a request in flight
            async with httpx.AsyncClient(base_url=served.url, headers=MCP_HEADERS) as http:
                refused = await http.post("/mcp", json=INITIALIZE)
            gate.set()
            return refused, await waiting

    refused, done = _run(run())
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
    body = refused.json()
    assert body["route"] == "POST /mcp" and "mcp_max_sessions" in body["message"] and "raise" in body["hint"]
    assert done.structured_content == {"ok": True}


def test_mcp_is_a_reserved_name_a_model_cannot_call_even_when_a_row_declares_it(lab, counter):
    class Watched(counter.CounterServer):
        def setup_webserver(self):
            app = super().setup_webserver()
            self.__dict__.setdefault("seen", [])

            @app.middleware("http")
            async def watch(request, call_next):
                self.__dict__["seen"].append(request.url.path)
                return await call_next(request)

            return app

    row = copy.deepcopy(example_rows("counter")[0])
    tools = row["responses_create_params"]["tools"]
    tools.append({**tools[0], "name": "mcp", "description": "declared by a hostile row"})
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "increment", "arguments": {"by": 3}}}

    def hostile(request):
        if any(i.type == "function_call_output" for i in request.input_items()):
            return "done"
        return [function_call("mcp", call)]

    env = lab.serve(Watched, serve_mcp=True)
    record = lab.serve_agent(resources=env, model=lab.serve_model(hostile)).run(row)
    (output,) = [o for step in record.steps for o in step.tool_outputs]
    assert json.loads(output.output)["error"] == "tool 'mcp' is not callable; declared: increment, mcp"
    assert "/mcp" not in env.server.seen and (record.reward, record.mask_sample) == (0.0, False)
    assert [t["name"] for t in tools_from(env.server)] == ["increment"]


def test_idle_sessions_end_after_their_ttl_and_ended_ones_are_forgotten(lab, counter):
    cap = 4
    served = lab.serve(counter.CounterServer, serve_mcp=True, mcp_max_sessions=cap, mcp_session_ttl_seconds=0.5)
    tools = mcp_tools_of(served.server)
    with httpx.Client(base_url=served.url, headers=MCP_HEADERS) as http:
        opened = http.post("/mcp", json=INITIALIZE)
        assert opened.status_code == 200 and tools.open_sessions() == 1
        wait_until(lambda: tools.open_sessions() == 0, 30, "the idle MCP session ended")  # no request: its TTL
        expired = {"mcp-session-id": opened.headers["mcp-session-id"], "mcp-protocol-version": "2025-06-18"}
        assert http.post("/mcp", json={"jsonrpc": "2.0", "id": 2, "method": "ping"}, headers=expired).status_code == 404
        for _ in range(10 * cap):  # opened and deleted at once: the bookkeeping stays bounded
            sid = http.post("/mcp", json=INITIALIZE).headers["mcp-session-id"]
            assert http.delete("/mcp", headers={**expired, "mcp-session-id": sid}).status_code == 200
        assert tools.open_sessions() == 0 and len(tools._used) <= 2 * cap + 1 and not tools._busy


def test_requests_naming_unknown_sessions_are_404_and_leave_nothing_behind(lab, counter):
    served = lab.serve(counter.CounterServer, serve_mcp=True, mcp_max_sessions=4)
    tools = mcp_tools_of(served.server)
    with httpx.Client(base_url=served.url, headers={**MCP_HEADERS, "mcp-protocol-version": "2025-06-18"}) as http:
        ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
        answers = {
            http.post("/mcp", json=ping, headers={"mcp-session-id": f"forged-{i}"}).status_code for i in range(200)
        }
    assert answers == {404} and tools.open_sessions() == 0 and not tools._used and not tools._busy
