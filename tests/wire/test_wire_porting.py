"""A server ported from the reference runs with only its import lines changed: the spec's stateful
sample, ending with its multi-worker entrypoint (``is_nemo_gym_fastapi_entrypoint``), on 2 workers."""

from __future__ import annotations

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


def test_spec_multi_worker_entrypoint_sample_runs_on_two_workers():
    with serve_entrypoint(APP, workers=2) as served:
        assert len(served.worker_pids()) == 2
        workers: set[str] = set()
        for secret in range(12):  # each episode on fresh connections: requests land on either worker
            with httpx.Client(
                base_url=served.url, timeout=TIMEOUT, limits=httpx.Limits(max_keepalive_connections=0)
            ) as client:
                seed = client.post("/seed_session", json=row(secret))
                assert seed.status_code == 200, seed.text
                workers.add(seed.headers["x-gymlab-worker"])
                answer = client.post("/verify", json={**row(secret), "response": response(f"It is {secret}.")})
                assert answer.status_code == 200, answer.text  # not a KeyError from another worker's memory
                assert answer.json()["reward"] == 1.0
        assert len(workers) == 2, f"all 12 seeds landed on worker {workers}; the routing was not exercised"
