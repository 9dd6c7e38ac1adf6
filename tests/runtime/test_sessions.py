"""Episode sessions over real loopback HTTP: wire bodies, the body ID as the cookie's session, 409/422
refusals, close by ID, locks and fences."""

import asyncio
import json

import httpx
import pytest
from fastapi import Request

from gymlab import (
    SESSION_ID_KEY,
    BaseVerifyRequest,
    ResourcesSeedRejectedError,
    ResourcesSeedSessionRequest,
    ResourcesSeedSessionResponse,
    SimpleResourcesServer,
    lost_session_verification,
)
from gymlab.fences import ResourcesSessionFences
from gymlab.locks import ResourcesSessionLocks


def seed_body(sid, rollout="r1", **task_data):
    return {
        "resources_session_id": sid,
        "episode_id": {"rollout_id": rollout, "attempt": 0},
        "task_id": {"taskset": "t", "task_id": "0"},
        "task_data": task_data,
    }


# -- wire bodies -----------------------------------------------------------------------------------


def test_observation_is_omitted_only_when_never_set():
    assert ResourcesSeedSessionResponse(resources_session_id="rs").model_dump() == {"resources_session_id": "rs"}
    assert json.loads(ResourcesSeedSessionResponse(resources_session_id="rs", observation=None).model_dump_json()) == {
        "resources_session_id": "rs",
        "observation": None,
    }
    assert ResourcesSeedSessionResponse(resources_session_id="rs", observation="").model_dump()["observation"] == ""
    parsed = ResourcesSeedSessionResponse.model_validate({"resources_session_id": "rs", "observation": None})
    assert parsed.model_dump() == {"resources_session_id": "rs", "observation": None}


def test_seed_request_carries_the_wire_reference_shape():
    body = seed_body("rs-1", city="SF")
    assert ResourcesSeedSessionRequest.model_validate(body).model_dump(mode="json") == body
    with pytest.raises(ValueError):
        ResourcesSeedSessionRequest.model_validate({**body, "resources_session_id": ""})


class Recorder(SimpleResourcesServer):
    """Records the session id each route saw; observation from task_data["observation"] when given."""

    seen: list = []

    def setup_webserver(self):
        app = super().setup_webserver()
        app.post("/tool")(self.tool)
        return app

    async def seed_session(self, request: Request, body: ResourcesSeedSessionRequest):
        self.seen.append(("seed", request.session[SESSION_ID_KEY]))
        if body.task_data.get("reject"):
            raise ResourcesSeedRejectedError("task_data.reject is set: this task can never start")
        if "observation" in body.task_data:
            return ResourcesSeedSessionResponse(
                resources_session_id=body.resources_session_id, observation=body.task_data["observation"]
            )
        return None

    async def tool(self, request: Request) -> dict:
        self.seen.append(("tool", request.session[SESSION_ID_KEY]))
        return {"ok": True}

    async def close_resources_session(self, resources_session_id):
        self.seen.append(("close", resources_session_id))

    async def verify(self, body: BaseVerifyRequest):
        return lost_session_verification(body, reason="recorder keeps nothing")


@pytest.fixture
def recorder(lab):
    handle = lab.serve(Recorder, seen=[])
    with httpx.Client(base_url=handle.url) as client:
        yield handle.server, client, handle


def test_seed_answer_has_observation_only_when_set_over_http(recorder):
    _, client, _ = recorder
    assert client.post("/seed_session", json=seed_body("a")).json() == {"resources_session_id": "a"}
    client.cookies.clear()
    assert client.post("/seed_session", json=seed_body("b", observation=None)).json() == {
        "resources_session_id": "b",
        "observation": None,
    }
    client.cookies.clear()
    assert client.post("/seed_session", json=seed_body("c", observation="")).json() == {
        "resources_session_id": "c",
        "observation": "",
    }


def test_the_body_id_is_the_session_id_of_seed_tools_and_close(recorder):
    server, client, _ = recorder
    assert client.post("/seed_session", json=seed_body("rs-7")).status_code == 200
    assert client.post("/tool", json={}).json() == {"ok": True}
    fresh = httpx.Client(base_url=str(client.base_url))  # a close after a lost seed reply: no cookie
    assert fresh.post("/close_session", json={"resources_session_id": "rs-7"}).json() == {
        "resources_session_id": "rs-7"
    }
    assert server.seen == [("seed", "rs-7"), ("tool", "rs-7"), ("close", "rs-7")]


def test_cookie_and_body_naming_different_sessions_get_409(recorder):
    server, client, _ = recorder
    client.post("/seed_session", json=seed_body("mine"))
    for path, body in (("/seed_session", seed_body("theirs")), ("/close_session", {"resources_session_id": "theirs"})):
        reply = client.post(path, json=body)
        assert reply.status_code == 409
        assert reply.json()["server"] == "recorder" and reply.json()["route"] == f"POST {path}"
        assert reply.json()["cookie_session_id"] == "mine" and reply.json()["body_session_id"] == "theirs"
    assert server.seen == [("seed", "mine")]  # no handler ran for either


def test_health_and_aggregate_metrics_set_no_cookie(recorder):
    _, client, _ = recorder
    assert "set-cookie" not in client.get("/health").headers
    assert "set-cookie" not in client.post("/aggregate_metrics", json={"verify_responses": []}).headers
    assert "set-cookie" in client.post("/tool", json={}).headers


def test_refusals_name_server_route_and_cause(recorder):
    _, client, _ = recorder
    rejected = client.post("/seed_session", json=seed_body("x", reject=True))
    assert rejected.status_code == 422
    assert rejected.json()["error"] == "ResourcesSeedRejectedError"
    assert rejected.json()["detail"] == (
        "recorder: POST /seed_session: task_data.reject is set: this task can never start"
    )
    client.cookies.clear()
    client.post("/seed_session", json=seed_body("y"))
    client.cookies.clear()
    conflict = client.post("/seed_session", json=seed_body("y", rollout="r2"))
    assert conflict.status_code == 409 and conflict.json()["error"] == "ResourcesSessionConflictError"
    assert "'y' is bound to episode {'rollout_id': 'r1', 'attempt': 0}" in conflict.json()["message"]
    client.cookies.clear()
    invalid = client.post("/seed_session", json={**seed_body("z"), "episode_id": "nope"})
    assert invalid.status_code == 422 and "episode_id" in invalid.json()["message"]


def test_close_runs_the_release_once_and_fences_the_id(recorder):
    server, client, _ = recorder
    client.post("/seed_session", json=seed_body("c1"))
    for _ in range(3):
        assert client.post("/close_session", json={"resources_session_id": "c1"}).status_code == 200
    assert server.seen.count(("close", "c1")) == 1
    late = httpx.post(str(client.base_url) + "/seed_session", json=seed_body("c1"))
    assert late.status_code == 409 and "a seed after its close is refused" in late.json()["message"]
    # a close of an ID nobody seeded fences it too, so a delayed seed cannot open it
    httpx.post(str(client.base_url) + "/close_session", json={"resources_session_id": "never"})
    assert httpx.post(str(client.base_url) + "/seed_session", json=seed_body("never")).status_code == 409


def test_idempotent_reseed_does_not_seed_again(recorder):
    server, client, _ = recorder
    first = client.post("/seed_session", json=seed_body("i", observation="look"))
    retry = httpx.post(str(client.base_url) + "/seed_session", json=seed_body("i", observation="look"))
    assert first.json() == retry.json() == {"resources_session_id": "i", "observation": "look"}
    assert server.seen == [("seed", "i")]


def test_flat_row_seeds_keep_their_old_behaviour(counter, lab, rows):
    env = lab.serve(counter.CounterServer)
    with httpx.Client(base_url=env.url) as client:
        row = rows("counter")[1]
        assert client.post("/seed_session", json=row).json() == {}
        (sid,) = env.server.session_state
        assert client.post("/increment", json={"by": 1}).json() == {"count": 6}
        graded = client.post("/verify", json={**row, "response": {"output": []}}).json()
        assert graded["reward"] == 1.0 and graded["mask_sample"] is False and env.server.session_state == {}
        lost = client.post("/verify", json={**row, "response": {"output": []}}).json()
    assert lost["mask_sample"] is True and lost["failure_kind"] == "session_lost"
    assert lost["failure_reason"] == "no counter is held for this session" and lost["target"] == 6
    assert lost["reward"] == 0.0


# -- locks and fences ------------------------------------------------------------------------------


async def test_locks_serialise_one_session_and_forget_it_afterwards():
    locks, order = ResourcesSessionLocks(), []
    entered = asyncio.Event()

    async def first():
        async with locks("s"):
            entered.set()
            order.append("first in")
            await asyncio.sleep(0)
            await asyncio.sleep(0)
            order.append("first out")

    async def second():
        await entered.wait()
        async with locks("s"):
            order.append("second in")

    async def other():
        await entered.wait()
        async with locks("t"):
            order.append("other in")

    await asyncio.gather(first(), second(), other())
    assert order.index("second in") > order.index("first out")
    assert order.index("other in") < order.index("first out")  # another session never waits
    assert len(locks) == 0


async def test_a_failing_holder_releases_its_lock():
    locks = ResourcesSessionLocks()
    with pytest.raises(RuntimeError):
        async with locks("s"):
            raise RuntimeError("seed failed")
    async with locks("s"):
        assert locks.locked("s")
    assert len(locks) == 0


def test_fences_expire_after_the_window():
    now = [1000.0]
    fences = ResourcesSessionFences(window_seconds=300, clock=lambda: now[0])
    fences.fence("a")
    now[0] += 299.5
    assert "a" in fences and fences.remaining("a") == pytest.approx(0.5)
    now[0] += 0.5
    assert "a" not in fences and len(fences) == 0


def test_fences_are_bounded():
    now = [0.0]
    fences = ResourcesSessionFences(window_seconds=10, max_fences=3, clock=lambda: now[0])
    for i in range(5):
        fences.fence(f"s{i}")
    assert len(fences) == 3 and "s0" not in fences and "s4" in fences and fences.evicted_early == 2
    now[0] = 100.0
    fences.fence("later")  # expired fences are dropped as new ones come
    assert len(fences._expiry) == 1


def test_fence_window_comes_from_the_server_config(counter):
    server = counter.CounterServer(session_close_retry_window_seconds=42)
    assert server.episode_sessions.fences.window_seconds == 42
    with pytest.raises(ValueError, match="window_seconds >= 0"):
        ResourcesSessionFences(window_seconds=-1)
