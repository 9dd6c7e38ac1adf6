"""Agent sessions keep the resources servers' session rules: seed and close by ``agent_session_id``,
the cookie bound to it, 409 on a mismatch, and with several workers one worker holds the state."""

from __future__ import annotations

from pathlib import Path

import httpx

from gymlab.testing.workers import serve_entrypoint
from tests.wire.agent_session_app import NotebookAgent

TIMEOUT = 60.0
APP = Path(__file__).with_name("agent_session_app.py")


def seed_body(sid: str, rollout: str = "r1") -> dict:
    return {
        "agent_session_id": sid,
        "episode_id": {"rollout_id": rollout, "attempt": 0},
        "task_id": {"taskset": "notes", "task_id": "0"},
    }


def close_body(sid: str, rollout: str = "r1") -> dict:
    return {"agent_session_id": sid, "episode_id": {"rollout_id": rollout, "attempt": 0}}


def status(reply: httpx.Response, expected: int) -> dict:
    assert reply.status_code == expected, f"{reply.request.url.path}: {reply.status_code} {reply.text}"
    return reply.json()


def test_agent_session_rules_with_one_worker(lab):
    agent = lab.serve(NotebookAgent, name="notebook_agent")
    with httpx.Client(base_url=agent.url, timeout=TIMEOUT) as client:
        assert status(client.post("/v1/agent_sessions", json=seed_body("as-1")), 200) == {"agent_session_id": "as-1"}
        assert client.cookies, "the seed binds its session to the cookie"
        assert status(client.post("/v1/agent_sessions", json=seed_body("as-1")), 200) == {"agent_session_id": "as-1"}
        assert status(client.post("/note", json={"text": "a"}), 200)["notes"] == ["a"]
        # The cookie names as-1: a seed or close naming another session is refused before any handler runs.
        mismatch = status(client.post("/v1/agent_sessions/close", json=close_body("as-2")), 409)
        assert "agent_session_id" in mismatch["detail"] and mismatch["server"] == "notebook_agent"
        status(client.post("/v1/agent_sessions", json=seed_body("as-2")), 409)
        status(client.post("/v1/agent_sessions/close", json=close_body("as-1", rollout="other")), 409)
        assert status(client.post("/note", json={"text": "b"}), 200)["notes"] == ["a", "b"]
        assert status(client.post("/v1/agent_sessions/close", json=close_body("as-1")), 200) == {
            "agent_session_id": "as-1"
        }
        assert status(client.post("/v1/agent_sessions/close", json=close_body("as-1")), 200) == {
            "agent_session_id": "as-1"
        }
        status(client.post("/note", json={"text": "c"}), 404)  # released
        status(client.post("/v1/agent_sessions", json=seed_body("as-1")), 409)  # fenced after its close
    with httpx.Client(base_url=agent.url, timeout=TIMEOUT) as other:
        status(other.post("/v1/agent_sessions", json={**seed_body("as-3"), "task_id": {"task_id": "1"}}), 200)
    with httpx.Client(base_url=agent.url, timeout=TIMEOUT) as other:
        status(other.post("/v1/agent_sessions", json={**seed_body("as-3"), "task_id": {"task_id": "2"}}), 409)
    with httpx.Client(base_url=agent.url, timeout=TIMEOUT) as other:
        unknown = status(other.post("/v1/agent_sessions", json={**seed_body("as-4"), "bogus": 1}), 422)
        assert "bogus" in unknown["message"]
    with httpx.Client(base_url=agent.url, timeout=TIMEOUT) as other:
        # Closing an ID nobody seeded fences it: a delayed seed cannot open it afterwards.
        status(other.post("/v1/agent_sessions/close", json=close_body("as-5")), 200)
    with httpx.Client(base_url=agent.url, timeout=TIMEOUT) as late:
        status(late.post("/v1/agent_sessions", json=seed_body("as-5")), 409)


def fresh_connections() -> httpx.Client:
    """A client that opens a new connection per request, so requests land on either worker."""
    return httpx.Client(timeout=TIMEOUT, limits=httpx.Limits(max_keepalive_connections=0))


def test_agent_session_state_stays_on_one_worker_of_two():
    with serve_entrypoint(APP, workers=2) as served:
        sessions: list[httpx.Client] = []
        seeded_on: set[str] = set()
        try:
            while len(seeded_on) < 2:  # seeds until both workers hold a session (bounded)
                assert len(sessions) < 64, f"64 seeds all landed on worker {seeded_on}"
                client = fresh_connections()
                sessions.append(client)
                i = len(sessions) - 1
                reply = client.post(f"{served.url}/v1/agent_sessions", json=seed_body(f"as-{i}", f"r{i}"))
                status(reply, 200)
                seeded_on.add(reply.headers["x-gymlab-worker"])
            forwarded = 0
            for round_ in range(40):  # at least 4 rounds; more (bounded) until a request was forwarded
                if round_ >= 4 and forwarded:
                    break
                # each round starts one session later: connections the kernel hands to the workers in turn
                # would otherwise meet the sessions (seeded in that same turn) each at its own worker
                shift = round_ % len(sessions)
                for i in [*range(shift, len(sessions)), *range(shift)]:
                    client = sessions[i]
                    reply = client.post(f"{served.url}/note", json={"text": f"{round_}"})
                    note = status(reply, 200)
                    assert note["notes"] == [str(r) for r in range(round_ + 1)], (i, note)
                    forwarded += "x-gymlab-forwarded-by" in reply.headers
            assert forwarded, "no request arrived at the worker not holding its session"
            # The cookie names as-0: a close naming another session is 409 in every worker.
            status(sessions[0].post(f"{served.url}/v1/agent_sessions/close", json=close_body("as-1", "r1")), 409)
            for i, client in enumerate(sessions):
                status(client.post(f"{served.url}/v1/agent_sessions/close", json=close_body(f"as-{i}", f"r{i}")), 200)
                status(client.post(f"{served.url}/note", json={"text": "after"}), 404)
        finally:
            for client in sessions:
                client.close()
