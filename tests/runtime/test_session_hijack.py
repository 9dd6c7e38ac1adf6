"""A session ID is readable in its cookie, so knowing one must not let another client reset or take over
its episode: a seed naming a live session without that session's cookie is refused 409 (the spec's
conflict), and the victim's episode goes on as its own. And the idle-session reaper counts idleness from
a request's end: a session with a request in flight longer than the TTL keeps its state. Real uvicorn
servers on loopback, the victim and the attacker each with its own cookie jar."""

from __future__ import annotations

import asyncio
import base64
import json
import threading

import httpx
import pytest
from fastapi import Request

from gymlab.examples import load_environment
from gymlab.protocol import SESSION_ID_KEY
from tests.runtime.asgi_util import wait_until


def cookie_session_id(client: httpx.Client) -> str:
    """The session ID as anyone holding the cookie's text reads it (signed, not encrypted)."""
    (value,) = [c.value for c in client.cookies.jar]
    return json.loads(base64.b64decode(value.split(".")[0]))[SESSION_ID_KEY]


def episode_seed(sid: str, rollout: str, initial_count: int) -> dict:
    return {
        "resources_session_id": sid,
        "episode_id": {"rollout_id": rollout, "attempt": 0},
        "task_id": {"taskset": "counter", "task_id": "0"},
        "task_data": {"initial_count": initial_count},
    }


VERIFY = {"responses_create_params": {"input": []}, "response": {"output": []}, "target": 3}


@pytest.mark.parametrize("victim_form", ["flat row", "episode session"])
@pytest.mark.parametrize("attack", ["episode seed", "flat seed naming agent_session_id"])
def test_a_seed_naming_another_clients_live_session_is_409_and_the_victim_is_unchanged(lab, victim_form, attack):
    env = lab.serve(load_environment("counter").CounterServer)
    with httpx.Client(base_url=env.url) as victim, httpx.Client(base_url=env.url) as attacker:
        if victim_form == "flat row":
            assert victim.post("/seed_session", json={"initial_count": 0}).status_code == 200
            sid = cookie_session_id(victim)
        else:
            sid = "victim-1"
            assert victim.post("/seed_session", json=episode_seed(sid, "victim", 0)).status_code == 200
            assert cookie_session_id(victim) == sid
        assert victim.post("/increment", json={"by": 1}).json() == {"count": 1}

        # the attacker knows the ID (readable in the victim's cookie) and seeds it at the target
        hijack = (
            episode_seed(sid, "attacker", 3)
            if attack == "episode seed"
            else {"initial_count": 3, "agent_session_id": sid}
        )
        refused = attacker.post("/seed_session", json=hijack)
        assert refused.status_code == 409, refused.text
        answer = refused.json()
        assert answer["error"] == "ResourcesSessionConflictError" and answer["route"] == "POST /seed_session"
        assert sid in answer["message"]
        assert "set-cookie" not in refused.headers  # no cookie for the victim's session either
        attacker.post("/increment", json={"by": 2})  # so the attacker's tool calls reach no session of the victim
        assert env.server.session_state[sid] == {"count": 1}  # unchanged

        # the victim's episode goes on as its own: two more increments reach the target, and it scores
        assert victim.post("/increment", json={"by": 2}).json() == {"count": 3}
        if victim_form == "flat row":
            assert victim.post("/verify", json=VERIFY).json()["reward"] == 1.0
        # the victim may seed its own session again (it carries the cookie), and a seed with a fresh ID works
        if victim_form == "flat row":
            assert victim.post("/seed_session", json=episode_seed(sid, "again", 7)).status_code == 200
        own = httpx.post(env.url + "/seed_session", json=episode_seed("attacker-own", "attacker", 3))
        assert own.status_code == 200 and env.server.session_state["attacker-own"] == {"count": 3}


def test_a_retried_episode_seed_without_its_cookie_still_gets_the_first_answer(lab):
    """The one seed that may name a live session without its cookie: the same episode's retry after a
    lost reply, answered as the first seed was (nothing seeded again); another episode's is 409."""
    env = lab.serve(load_environment("counter").CounterServer)
    first = httpx.post(env.url + "/seed_session", json=episode_seed("rs-1", "r1", 0))
    with httpx.Client(base_url=env.url) as retry:
        again = retry.post("/seed_session", json=episode_seed("rs-1", "r1", 0))
        assert again.status_code == 200 and again.json() == first.json()
        assert retry.post("/increment", json={"by": 2}).json() == {"count": 2}
    other = httpx.post(env.url + "/seed_session", json=episode_seed("rs-1", "r2", 5))
    assert other.status_code == 409 and env.server.session_state["rs-1"] == {"count": 2}


def test_a_gymnasium_reset_naming_a_live_episode_is_409(lab):
    env = lab.serve(load_environment("blackjack").BlackjackEnv)
    with httpx.Client(base_url=env.url) as victim, httpx.Client(base_url=env.url) as attacker:
        first = victim.post("/reset", json={"responses_create_params": {"input": []}, "seed": 1})
        assert first.status_code == 200
        sid = cookie_session_id(victim)
        held = repr(env.server.session_state[sid])
        body = {"responses_create_params": {"input": []}, "seed": 2, "resources_session_id": sid}
        refused = attacker.post("/reset", json=body)
        assert refused.status_code == 409, refused.text
        assert repr(env.server.session_state[sid]) == held  # the victim's hand is the one it was dealt
        again = victim.post("/reset", json=body)  # with its own cookie, the victim may reset its episode
        assert again.status_code == 200 and sid in env.server.session_state


@pytest.mark.parametrize("client", ["waits", "hangs up"])
def test_a_request_in_flight_longer_than_the_ttl_keeps_its_session(lab, client):
    """The slow request starts before a second session is seeded; that second session is reaped (so the
    TTL has passed for a session younger than the slow request's start) while the slow request's session
    keeps its state, and is reaped only once it has been idle for a TTL after the request ended. A
    client that hangs up midway leaves the request in flight until its handler ends, and no count behind."""
    release = threading.Event()
    entered = threading.Event()
    counter = load_environment("counter")

    class SlowCounter(counter.CounterServer):
        def setup_webserver(self):
            app = super().setup_webserver()
            app.post("/slow")(self.slow)
            return app

        async def slow(self, request: Request) -> dict:
            sid = request.session[SESSION_ID_KEY]
            entered.set()
            await asyncio.to_thread(release.wait, 120)  # until the test has seen the reaper pass
            state = self.session_state.get(sid)
            return {"held": state is not None, "count": state and state["count"]}

    env = lab.serve(SlowCounter, session_ttl_seconds=0.5)
    timeout = httpx.Timeout(120, read=120 if client == "waits" else 1.0)
    with httpx.Client(base_url=env.url, timeout=timeout) as slow, httpx.Client(base_url=env.url) as idle:
        assert slow.post("/seed_session", json={"initial_count": 4}).status_code == 200
        answer: dict = {}

        def call() -> None:
            try:
                answer.update(slow.post("/slow", json={}).json())
            except httpx.ReadTimeout:  # the handler waits for the release: this client gives up first
                answer["hung up"] = True

        def sessions() -> dict:
            return httpx.get(env.url + "/health").json()["sessions"]

        request = threading.Thread(target=call)
        request.start()
        try:
            assert entered.wait(60)
            assert idle.post("/seed_session", json={"initial_count": 0}).status_code == 200
            wait_until(lambda: sessions()["reaped"] == 1, 60, "the idle session reaped")
            if client == "hangs up":
                request.join(120)
                assert answer == {"hung up": True}
            assert env.server.session_state == {cookie_session_id(slow): {"count": 4}}
        finally:
            release.set()
            request.join(120)
        if client == "waits":
            assert answer == {"held": True, "count": 4}
        wait_until(lambda: sessions()["reaped"] == 2, 60, "the slow session reaped once idle after its request")
        assert env.server.session_state == {} and sessions()["held"] == 0
