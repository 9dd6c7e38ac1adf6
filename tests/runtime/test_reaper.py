"""Bounded state: episode sessions whose close never arrives are released by the idle-session reaper
through the server's own release hook, and /health counts them."""

from __future__ import annotations

import gc
import sys
import time

import httpx
import pytest

from gymlab.examples import load_environment
from tests.runtime.asgi_util import call, lifespan, wait_for, wait_until

SESSIONS = 50_000


def seed_body(sid: str, rollout: str = "r") -> dict:
    return {
        "resources_session_id": sid,
        "episode_id": {"rollout_id": rollout, "attempt": 0},
        "task_id": {"taskset": "counter", "task_id": "0"},
        "task_data": {"initial_count": 1},
    }


async def test_fifty_thousand_unclosed_seeds_are_reaped_and_memory_returns():
    counter = load_environment("counter")
    server = counter.CounterServer(session_ttl_seconds=3600, session_close_retry_window_seconds=0.5)
    episodes = server.episode_sessions
    app = server.app
    async with lifespan(app):
        assert (await call(app, "/seed_session", seed_body("warm-up")))[0] == 200  # imports, caches
        gc.collect()
        blocks_before = sys.getallocatedblocks()
        started = time.monotonic()
        for i in range(SESSIONS):
            status, answer = await call(app, "/seed_session", seed_body(f"rs-{i}", f"r{i}"))
            assert status == 200, answer
        seeding = time.monotonic() - started
        gc.collect()
        grown = sys.getallocatedblocks() - blocks_before
        assert len(server.session_state) == SESSIONS + 1 and len(episodes) == SESSIONS + 1
        assert grown > SESSIONS * 3, f"{SESSIONS} held sessions grew pymalloc by only {grown} blocks"

        episodes.ttl_seconds = 0.5  # nobody closes them: the lifespan's reaper must
        await wait_for(
            lambda: episodes.counts()["held"] == 0 and episodes.counts()["fenced"] == 0,
            timeout=60,
            what=f"{SESSIONS} idle sessions reaped and their fences expired",
        )
        status, health = await call(app, "/health", None, method="GET")
        assert status == 200 and health["sessions"]["reaped"] == SESSIONS + 1 and health["sessions"]["open"] == 0
        assert server.session_state == {} and len(episodes.locks) == 0
        gc.collect()
        left = sys.getallocatedblocks() - blocks_before
        assert left < grown * 0.05, f"after reaping, {left} of {grown} pymalloc blocks are still held"
    assert seeding < 120  # a yardstick, not a benchmark: the whole test is well under that


def test_reaper_runs_over_loopback_and_health_counts(lab):
    counter = load_environment("counter")
    env = lab.serve(counter.CounterServer, session_ttl_seconds=0.5)
    with httpx.Client(base_url=env.url) as client:
        for i in range(5):
            client.cookies.clear()
            assert client.post("/seed_session", json=seed_body(f"ep-{i}", f"r{i}")).status_code == 200
        client.cookies.clear()
        assert client.post("/seed_session", json={"initial_count": 3}).status_code == 200  # a flat-row seed
        assert client.get("/health").json()["sessions"]["held"] == 6

        def health():
            return client.get("/health").json()["sessions"]

        wait_until(lambda: health()["held"] == 0, 30, "6 idle sessions reaped over loopback")
        assert health()["reaped"] == 6 and env.server.session_state == {}
        verify = client.post(
            "/verify", json={"responses_create_params": {"input": []}, "response": {"output": []}, "target": 3}
        )
        assert verify.json()["mask_sample"] is True and verify.json()["failure_kind"] == "session_lost"
        late = httpx.post(env.url + "/seed_session", json=seed_body("ep-0", "r0"))
        assert late.status_code == 409  # a reaped session is fenced like a closed one


def test_a_used_session_is_not_reaped_and_a_verified_one_is_not_held(lab):
    counter = load_environment("counter")
    env = lab.serve(counter.CounterServer, session_ttl_seconds=2.0)  # a TTL no busy machine stalls through
    with httpx.Client(base_url=env.url) as busy, httpx.Client(base_url=env.url) as done:
        busy.post("/seed_session", json={"initial_count": 0})
        done.post("/seed_session", json={"initial_count": 0})
        body = {"responses_create_params": {"input": []}, "response": {"output": []}, "target": 0}
        assert done.post("/verify", json=body).json()["reward"] == 1.0
        assert busy.get("/health").json()["sessions"]["held"] == 1  # the verify released the other
        deadline = time.monotonic() + 4.0  # two TTLs of use, a request every ~0.1 s
        while time.monotonic() < deadline:
            assert busy.post("/increment", json={"by": 1}).status_code == 200
            time.sleep(0.1)
        assert busy.get("/health").json()["sessions"]["reaped"] == 0


def test_gymnasium_resets_are_reaped_through_close_session(lab):
    blackjack = load_environment("blackjack")
    released = []

    class Recorded(blackjack.BlackjackEnv):
        async def close_session(self, session_id):
            released.append(session_id)
            await super().close_session(session_id)

    env = lab.serve(Recorded, session_ttl_seconds=0.5)
    with httpx.Client(base_url=env.url) as client:
        assert client.post("/reset", json={"responses_create_params": {"input": []}, "seed": 1}).status_code == 200
        assert len(env.server.session_state) == 1
        wait_until(lambda: client.get("/health").json()["sessions"]["reaped"] == 1, 30, "the idle hand reaped")
        assert env.server.session_state == {} and len(released) == 1


def test_ttl_none_disables_the_reaper(counter):
    server = counter.CounterServer(session_ttl_seconds=None)
    assert server.episode_sessions.ttl_seconds is None
    assert counter.CounterServer(session_ttl_seconds=0).episode_sessions.ttl_seconds is None
    assert counter.CounterServer().session_ttl_seconds == 3600


async def test_idleness_counts_from_a_requests_end_and_a_busy_session_is_never_reaped():
    """On a clock the test moves: a request that began before the TTL and is still running protects its
    session; once it ends, the session is reaped only a whole TTL later."""
    from gymlab._runtime.episodes import EpisodeSessions

    now = [0.0]
    released: list[str] = []

    async def release(sid):
        released.append(str(sid))

    episodes = EpisodeSessions(ttl_seconds=10, release=release, clock=lambda: now[0])
    episodes.track_flat("busy")
    episodes.track_flat("idle")
    episodes.begin("busy")
    episodes.begin("busy")  # two requests in flight on one session
    now[0] = 25.0
    assert await episodes.reap() == 1 and released == ["idle"]
    episodes.end("busy")
    now[0] = 50.0
    assert await episodes.reap() == 0  # one request still in flight
    episodes.end("busy")  # idle from now (50)
    now[0] = 59.0
    assert await episodes.reap() == 0 and episodes.counts()["held"] == 1
    now[0] = 60.5
    assert await episodes.reap() == 1 and released == ["idle", "busy"]
    assert episodes._busy == {}  # nothing left behind once its requests ended


if __name__ == "__main__":
    sys.exit(pytest.main([__file__]))
