"""McpResourcesServer: an MCP server's tools as routes, one MCP session per episode, against real
servers on 127.0.0.1: the calculator's own ``/mcp`` (streamable HTTP) and the notes example (stdio)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import httpx
import pytest
from fastapi import Request

from gymlab import McpResourcesServer, ServerStartError, load_environment, mcp_tools_from, tools_from
from gymlab.examples import example_rows
from gymlab.protocol import SESSION_ID_KEY, BaseSeedSessionRequest, BaseSeedSessionResponse
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


class McpCalculatorWithState(McpCalculator):
    """Keeps per-episode state besides its MCP session, as the base's docstring invites."""

    async def seed_session(self, request: Request, body: BaseSeedSessionRequest) -> BaseSeedSessionResponse:
        answer = await super().seed_session(request, body)
        self.session_state[request.session[SESSION_ID_KEY]] = {"seeded": True}
        return answer


def test_a_verify_releases_the_episode_state_and_its_mcp_session(lab, native):
    env = lab.serve(McpCalculatorWithState, mcp_url=f"{native.url}/mcp")
    row = example_rows("calculator")[0]
    verify = {
        **row,
        "response": {
            "output": [
                {"type": "function_call", "call_id": "c1", "name": "square", "arguments": json.dumps({"value": 3})}
            ]
        },
    }
    with httpx.Client(base_url=env.url) as http:
        assert http.post("/seed_session", json={}).status_code == 200
        assert (len(env.server.session_state), env.server.open_mcp_sessions) == (1, 1)
        assert http.post("/verify", json=verify).status_code == 200
        # the base's rule holds here too: the state goes with the verify, not at the reaper's turn
        assert (len(env.server.session_state), env.server.open_mcp_sessions) == (0, 0)
        assert http.post("/seed_session", json={}).status_code == 200
        assert http.post("/verify", json={**verify, "close_follows": True}).status_code == 200
        assert (len(env.server.session_state), env.server.open_mcp_sessions) == (1, 0)  # the close releases it
        assert http.post("/close_session", json={}).status_code == 200
        assert len(env.server.session_state) == 0


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


notes = load_environment("mcp_notes")

#: An MCP server that ignores SIGTERM and stays after its stdin closes: the notes server the first
#: time it starts (so the tools list), then, once the flag file exists, a process that never answers.
STUBBORN = """
import os, runpy, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
flag = sys.argv[1]
if os.path.exists(flag):
    time.sleep(600)
open(flag, "w").close()
sys.argv = [sys.argv[2]]
try:
    runpy.run_path(sys.argv[0], run_name="__main__")
finally:
    time.sleep(600)
"""


def _stubborn(tmp_path: Path) -> list[str]:
    notes_mcp = str(Path(notes.__file__).with_name("notes_mcp.py"))
    return [sys.executable, "-c", STUBBORN, str(tmp_path / f"started-{uuid.uuid4().hex}"), notes_mcp]


def _running(marker: str) -> list[int]:
    """Live processes whose command line holds ``marker``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if state not in "ZX" and marker.encode() in cmdline:
                found.append(int(entry.name))
    return found


def test_seeds_past_the_process_cap_are_503_with_retry_after_until_one_ends(lab):
    env = lab.serve(notes.NotesServer, mcp_max_processes=2)
    marker = notes.NOTES_COMMAND[-1]
    clients = [httpx.Client(base_url=env.url) for _ in range(3)]
    try:
        assert [c.post("/seed_session", json={}).status_code for c in clients[:2]] == [200, 200]
        refused = clients[2].post("/seed_session", json={})
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        body = refused.json()
        assert body["server"] == "notes_server" and body["route"] == "POST /seed_session"
        assert "the most this server opens at once (mcp_max_processes)" in body["message"]
        assert "raise mcp_max_processes" in body["message"]
        assert env.server.open_mcp_sessions == 2 and len(_running(marker)) == 2
        assert clients[0].post("/close_session", json={}).status_code == 200
        assert clients[2].post("/seed_session", json={}).status_code == 200  # room again
        assert env.server.open_mcp_sessions == 2
    finally:
        for c in clients:
            c.post("/close_session", json={})
            c.close()
    wait_until(lambda: not _running(marker), 30, "the notes MCP processes exited")


def test_a_child_ignoring_sigterm_does_not_outlive_a_failed_open(lab, tmp_path):
    command = _stubborn(tmp_path)
    # the first start (the tool listing) must answer within the bound on a busy machine too
    env = lab.serve(notes.NotesServer, mcp_command=command, mcp_open_timeout_seconds=10)
    with httpx.Client(base_url=env.url, timeout=120) as http:
        failed = http.post("/seed_session", json={})  # the second start: it never answers
    assert failed.status_code == 502 and "could not open an MCP session" in failed.json()["detail"]
    wait_until(lambda: not _running(command[3]), 60, "the stubborn MCP process killed")


SERVE_STUBBORN = """
import json, sys
from gymlab.examples import load_environment
notes = load_environment("mcp_notes")
notes.NotesServer(port=int(sys.argv[1]), mcp_command=json.loads(sys.argv[2])).run_webserver()
"""


def test_a_child_ignoring_sigterm_dies_with_its_killed_server(tmp_path):
    from gymlab._runtime.serve import answers_health, free_port

    command, port = _stubborn(tmp_path), free_port()
    root = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))}
    server = subprocess.Popen(
        [sys.executable, "-c", SERVE_STUBBORN, str(port), json.dumps(command)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: answers_health(url) or server.poll() is not None, 120, "the server up")
        assert server.poll() is None
        os.unlink(command[3])  # the episode's process speaks MCP too
        with httpx.Client(base_url=url, timeout=60) as http:
            assert http.post("/seed_session", json={}).status_code == 200
        assert _running(command[3])
        server.kill()  # no shutdown runs: only the kernel can end the child
        server.wait(60)
        wait_until(lambda: not _running(command[3]), 60, "the MCP process died with its server")
    finally:
        if server.poll() is None:
            server.kill()
            server.wait(60)
        for pid in _running(command[3]):  # only when the test failed: what it started
            os.kill(pid, signal.SIGKILL)


def test_concurrent_seeds_never_open_more_processes_than_the_cap(lab):
    env = lab.serve(notes.NotesServer, mcp_max_processes=2)
    marker = notes.NOTES_COMMAND[-1]

    async def seeds(n: int) -> list[int]:
        clients = [httpx.AsyncClient(base_url=env.url, timeout=120) for _ in range(n)]
        try:
            answers = await asyncio.gather(*(c.post("/seed_session", json={}) for c in clients))
            peak = len(_running(marker))
            await asyncio.gather(*(c.post("/close_session", json={}) for c in clients))
            return [a.status_code for a in answers], peak
        finally:
            await asyncio.gather(*(c.aclose() for c in clients))

    statuses, peak = asyncio.run(seeds(8))
    assert sorted(statuses) == [200] * 2 + [503] * 6 and peak <= 2
    assert env.server.open_mcp_sessions == 0
    wait_until(lambda: not _running(marker), 30, "the notes MCP processes exited")
