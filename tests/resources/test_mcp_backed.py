"""McpResourcesServer: an MCP server's tools as routes, one MCP session per episode, against real
servers on 127.0.0.1: the calculator's own ``/mcp`` (streamable HTTP) and the notes example (stdio)."""

from __future__ import annotations

import os
from pathlib import Path

import httpx
import pytest

from gymlab import McpResourcesServer, ServerStartError, load_environment, mcp_tools_from, tools_from
from gymlab.examples import example_rows
from gymlab.resources.mcp_tools import mcp_tools_of
from gymlab.testing.workers import wait_until

calculator = load_environment("calculator")


class McpCalculator(McpResourcesServer):
    """The calculator's grading over the calculator's tools, reached through MCP."""

    verify = calculator.CalculatorServer.verify


@pytest.fixture
def native(lab):
    return lab.serve(calculator.CalculatorServer, serve_mcp=True)


@pytest.fixture
def backed(lab, native):
    return lab.serve(McpCalculator, mcp_url=f"{native.url}/mcp")


def test_rows_tools_from_the_mcp_server_are_the_routes_tools(native, backed):
    assert mcp_tools_from(f"{native.url}/mcp") == tools_from(calculator.CalculatorServer)
    assert tools_from(backed.server) == tools_from(calculator.CalculatorServer)


def test_an_episode_through_mcp_is_graded_like_the_native_tools(lab, native, backed):
    model = lab.serve_model(calculator.policy)
    rows = example_rows("calculator")
    direct = lab.run_many(lab.serve_agent(resources=native, model=model, name="direct"), rows)
    through = lab.run_many(lab.serve_agent(resources=backed, model=model, name="through"), rows)
    assert [r.reward for r in through] == [r.reward for r in direct] == [1.0] * len(rows)
    outputs = [[o.output for s in r.steps for o in s.tool_outputs] for r in (*direct, *through)]
    assert outputs[: len(rows)] == outputs[len(rows) :]  # the model read the same tool answers
    # no MCP session is left on either side
    assert backed.server.open_mcp_sessions == 0
    assert httpx.get(f"{backed.url}/health").json()["sessions"]["held"] == 0
    wait_until(lambda: mcp_tools_of(native.server).open_sessions() == 0, 10, "the calculator's MCP sessions closed")


def test_close_session_and_the_reaper_end_the_mcp_session(lab, native):
    backed = lab.serve(McpCalculator, mcp_url=f"{native.url}/mcp", session_ttl_seconds=30)
    mcp = mcp_tools_of(native.server)
    with httpx.Client(base_url=backed.url) as http:
        seed = {"resources_session_id": "ep-1", "episode_id": {"rollout_id": "e1"}}
        assert http.post("/seed_session", json=seed).status_code == 200
        assert (backed.server.open_mcp_sessions, mcp.open_sessions()) == (1, 1)
        assert http.post("/square", json={"value": 9}).json() == {"result": 81}  # the cookie names ep-1
        assert http.post("/close_session", json={"resources_session_id": "ep-1"}).status_code == 200
        assert backed.server.open_mcp_sessions == 0
        wait_until(lambda: mcp.open_sessions() == 0, 10, "the MCP session closed")

        http.cookies.clear()  # a new episode, a new cookie
        assert (
            http.post(
                "/seed_session", json={"resources_session_id": "ep-2", "episode_id": {"rollout_id": "e2"}}
            ).status_code
            == 200
        )
        backed.server.episode_sessions.ttl_seconds = 0.2  # nobody closes ep-2: the reaper does
        wait_until(lambda: backed.server.open_mcp_sessions == 0, 10, "the reaper closed the MCP session")
        wait_until(lambda: mcp.open_sessions() == 0, 10, "the MCP session closed")


def test_errors_name_the_server_route_and_cause(lab, native, backed, caplog):
    with httpx.Client(base_url=backed.url) as http:
        unseeded = http.post("/square", json={"value": 2})
        assert unseeded.status_code == 404 and "POST /seed_session first" in unseeded.json()["detail"]
        assert http.post("/seed_session", json={}).status_code == 200
        bad = http.post("/square", json={"value": "two"})
        assert bad.status_code == 422
        assert bad.json()["route"] == "POST /square"
        assert "the tool 'square' failed" in bad.json()["detail"] and "value: Input should be" in bad.json()["detail"]
        unknown = http.post("/cube", json={"value": 2})
        assert unknown.status_code == 422 and "unknown tool 'cube'" in unknown.json()["detail"]
        assert http.post("/reset", json={}).status_code == 404  # a lifecycle name is never a tool
        assert http.post("/square", content=b"[1, 2]", headers={"content-type": "application/json"}).status_code == 422
        assert http.post("/square", json={"value": 5}).json() == {"result": 25}  # the episode goes on
    with pytest.raises(ValueError, match="set exactly one of mcp_command"):
        McpCalculator().app  # noqa: B018
    with pytest.raises(ServerStartError, match="nowhere: its startup failed: .*could not list the tools of the MCP"):
        lab.serve(McpCalculator, name="nowhere", mcp_url="http://127.0.0.1:9/mcp", mcp_open_timeout_seconds=10)
    assert "could not list the tools of the MCP server http://127.0.0.1:9/mcp: ConnectError" in caplog.text


def test_the_notes_example_over_stdio_ends_its_processes(lab):
    notes = load_environment("mcp_notes")
    env = lab.serve(notes.NotesServer)
    agent = lab.serve_agent(resources=env, model=lab.serve_model(notes.policy))
    rows = example_rows("mcp_notes")[:2]
    runs = lab.run_many(agent, rows)
    assert [r.reward for r in runs] == [1.0, 1.0], [r.failure_reason for r in runs]
    assert env.server.open_mcp_sessions == 0
    wait_until(lambda: not _notes_processes(), 15, "the notes MCP processes exited")


def _notes_processes() -> list[int]:
    """This process's children running notes_mcp.py."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if int(stat[1]) == os.getpid() and stat[0] not in "ZX" and b"notes_mcp.py" in cmdline:
            found.append(int(entry.name))
    return found


def test_an_mcp_session_that_ended_is_410_and_still_closes(lab, native, backed):
    with httpx.Client(base_url=backed.url) as http:
        assert http.post("/seed_session", json={}).status_code == 200
        native.stop()  # the MCP server goes away mid-episode
        lost = http.post("/square", json={"value": 3})
        assert lost.status_code == 410, lost.text  # simple_agent masks the episode: session_lost
        assert lost.json()["route"] == "POST /square" and "the MCP session ended" in lost.json()["detail"]
        assert http.post("/close_session", json={}).status_code == 200
    assert backed.server.open_mcp_sessions == 0
