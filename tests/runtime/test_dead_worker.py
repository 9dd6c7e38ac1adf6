"""A dead worker costs exactly the episodes it touched, masked, every time: under load, with kept-open
connections to it.

A 4-worker counter serves 64 concurrent episodes; one worker is killed while every episode is in
flight. An episode whose session the dead worker held ends masked ``session_lost`` (its next request,
or its release, gets the ownership table's 410). An episode with a request in flight on a connection
the dead worker had accepted ends masked ``transport_peer_drop``: the request may have run, so it is
never sent again. Every other episode is graded as if nothing happened; none is an unmasked failure.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading

from gymlab.examples import environment_dir, example_rows, load_environment
from gymlab.testing.workers import process_gone, serve_entrypoint, wait_until

counter = load_environment("counter")
EPISODES = 64


def _sockets(pid: int) -> int:
    """How many sockets process ``pid`` holds open (its accepted connections among them)."""
    count = 0
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            count += os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:")
        except OSError:
            pass
    return count


def test_killing_a_worker_under_load_masks_exactly_its_episodes(lab):
    started = threading.Event()
    calls = {"n": 0}

    async def policy(request):
        calls["n"] += 1
        if calls["n"] >= EPISODES:
            started.set()  # every episode has seeded and asked the model at least once
        await asyncio.sleep(0.01)  # a model that takes a moment: episodes stay in flight
        return counter.policy(request)

    with serve_entrypoint(environment_dir("counter") / "app.py", workers=4) as served:
        agent = lab.serve_agent("simple_agent", resources=served.url, model=lab.serve_model(policy))
        rows = [dict(r, target=r["initial_count"] + 6) for r in example_rows("counter")]
        for r in rows:  # six increments an episode, so the kill lands mid-episode
            r["responses_create_params"]["input"][0]["content"] = (
                f"The counter starts at {r['initial_count']}. Use the increment tool, one step at a time, "
                f"until it reads {r['target']}."
            )
        batch = [rows[i % len(rows)] for i in range(EPISODES)]
        run = {}
        runner = threading.Thread(
            target=lambda: run.setdefault("rollouts", lab.run_many(agent, batch, concurrency=EPISODES))
        )
        runner.start()
        assert started.wait(120), "the episodes did not start"
        # The kernel hands connections to workers unevenly (on a busy machine one worker may take
        # them all): kill the one holding the most client connections, so it holds sessions.
        victim = max(served.worker_pids(), key=_sockets)
        os.kill(victim, signal.SIGKILL)
        wait_until(lambda: process_gone(victim), 30, "the killed worker gone")
        runner.join(180)
        assert not runner.is_alive()
    rollouts = run["rollouts"]
    outcomes = {(r.mask_sample, r.failure_kind, r.reward) for r in rollouts}
    allowed = {(True, "session_lost", 0.0), (True, "transport_peer_drop", 0.0), (False, None, 1.0)}
    assert outcomes <= allowed, rollouts.failures
    masked = [r for r in rollouts if r.mask_sample]
    assert masked, "no episode touched the killed worker"
    assert len(masked) < EPISODES
    for r in masked:
        cause = "no longer running" if r.failure_kind == "session_lost" else "dropped the connection"
        assert cause in r.failure_reason, r.failure_reason
