"""A close whose release raises is not recorded as closed: the retry runs the release again, then fences.
A release hook written as the reference writes it receives the close body, not a bare string."""

from __future__ import annotations

import httpx
import pytest
from fastapi import Request

from gymlab import BaseVerifyRequest, ResourcesSeedSessionRequest, SimpleResourcesServer, lost_session_verification
from gymlab.protocol.sessions import ResourcesCloseSessionRequest


def seed_body(sid: str) -> dict:
    return {"resources_session_id": sid, "episode_id": {"rollout_id": "r1", "attempt": 0}, "task_data": {}}


class Flaky(SimpleResourcesServer):
    """Holds a 'container' per session; its first release fails like a lost Docker daemon."""

    held: dict = {}
    attempts: list = []

    async def seed_session(self, request: Request, body: ResourcesSeedSessionRequest):
        self.held[body.resources_session_id] = "container"

    async def close_resources_session(self, resources_session_id: str) -> None:
        self.attempts.append(resources_session_id)
        if len(self.attempts) == 1:
            raise ConnectionError("docker daemon unreachable")
        del self.held[resources_session_id]

    async def verify(self, body: BaseVerifyRequest):
        return lost_session_verification(body)


class ReferenceStyle(SimpleResourcesServer):
    """Its release hook is written as the reference's is: it receives the close request body."""

    bodies: list = []

    async def close_resources_session(self, body: ResourcesCloseSessionRequest) -> None:
        self.bodies.append((body.resources_session_id, body.episode_id and body.episode_id.rollout_id, str(body)))

    async def verify(self, body: BaseVerifyRequest):
        return lost_session_verification(body)


def test_a_failed_release_is_retried_not_forgotten(lab):
    env = lab.serve(Flaky, held={}, attempts=[])
    url = env.url
    assert httpx.post(url + "/seed_session", json=seed_body("rs-1")).status_code == 200
    failed = httpx.post(url + "/close_session", json={"resources_session_id": "rs-1"})
    assert failed.status_code == 500
    answer = failed.json()
    assert answer["error"] == "ResourcesReleaseFailedError" and answer["failure"]["kind"] == "session_release_failed"
    with pytest.raises(
        AssertionError,
        match=r"flaky: POST /close_session: releasing session 'rs-1' raised "
        r"ConnectionError: docker daemon unreachable; .*retry the close",
    ):
        raise AssertionError(answer["detail"])
    assert env.server.episode_sessions.is_open("rs-1") and "rs-1" not in env.server.episode_sessions.fences
    retried = httpx.post(url + "/close_session", json={"resources_session_id": "rs-1"})
    assert retried.status_code == 200 and env.server.attempts == ["rs-1", "rs-1"] and env.server.held == {}
    assert "rs-1" in env.server.episode_sessions.fences
    assert httpx.post(url + "/close_session", json={"resources_session_id": "rs-1"}).status_code == 200
    assert env.server.attempts == ["rs-1", "rs-1"]  # closed now: a repeat runs nothing


def test_a_reference_style_hook_receives_the_close_body(lab):
    env = lab.serve(ReferenceStyle, bodies=[])
    httpx.post(env.url + "/seed_session", json=seed_body("rs-2"))
    close = {"resources_session_id": "rs-2", "episode_id": {"rollout_id": "r1", "attempt": 0}}
    assert httpx.post(env.url + "/close_session", json=close).status_code == 200
    assert env.server.bodies == [("rs-2", "r1", "rs-2")]


def test_a_string_hook_still_gets_a_plain_usable_id(lab, counter):
    env = lab.serve(counter.CounterServer)
    httpx.post(env.url + "/seed_session", json=seed_body("rs-3"))
    assert "rs-3" in env.server.session_state
    assert httpx.post(env.url + "/close_session", json={"resources_session_id": "rs-3"}).status_code == 200
    assert env.server.session_state == {}
