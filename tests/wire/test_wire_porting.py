"""A server ported from the reference runs with only its import lines changed: the spec's stateful
sample, ending with its multi-worker entrypoint (``is_nemo_gym_fastapi_entrypoint``), on 2 workers."""

from __future__ import annotations

import time
from pathlib import Path

import httpx

import gymlab
from gymlab.testing.workers import serve_entrypoint

TIMEOUT = 60.0
APP = Path(__file__).with_name("spec_stateful_app.py")


def test_the_reference_entrypoint_name_is_exported():
    assert gymlab.is_nemo_gym_fastapi_entrypoint is gymlab.is_gymlab_fastapi_entrypoint
    assert not gymlab.is_nemo_gym_fastapi_entrypoint(str(APP))  # imported here, not by a worker


def row(secret: int) -> dict:
    return {"responses_create_params": {"input": "Say the secret."}, "secret": secret}


def response(text: str) -> dict:
    return {
        "id": "resp_1",
        "created_at": 0,
        "model": "m",
        "object": "response",
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": text, "annotations": []}],
            }
        ],
    }


def _episode(url: str, secret: int) -> str:
    """One seed + verify on fresh connections (so requests may land on either worker), checked;
    the worker that took the seed."""
    with httpx.Client(base_url=url, timeout=TIMEOUT, limits=httpx.Limits(max_keepalive_connections=0)) as client:
        seed = client.post("/seed_session", json=row(secret))
        assert seed.status_code == 200, seed.text
        answer = client.post("/verify", json={**row(secret), "response": response(f"It is {secret}.")})
        assert answer.status_code == 200, answer.text  # not a KeyError from another worker's memory
        assert answer.json()["reward"] == 1.0
        return seed.headers["x-gymlab-worker"]


def test_spec_multi_worker_entrypoint_sample_runs_on_two_workers():
    with serve_entrypoint(APP, workers=2) as served:
        assert len(served.worker_pids()) == 2
        # Batches of 12 episodes until seeds landed on both workers: a busy machine can hand one
        # worker every connection of a batch. Every episode is graded whichever worker took it.
        workers: set[str] = set()
        secret, deadline = 0, time.monotonic() + TIMEOUT
        while len(workers) < 2:
            assert time.monotonic() < deadline, f"all {secret} seeds landed on worker {workers}; routing not exercised"
            for _ in range(12):
                workers.add(_episode(served.url, secret))
                secret += 1
