"""``gymlab serve --ray``'s door refuses hostile bodies as the servers do (413 past the body bound, 422 for
what is not a JSON object, each naming server, route, cause and what to do) before any cell is asked;
no Ray is needed: the door is a FastAPI app over the pool it is given, served here on real loopback."""

from __future__ import annotations

import httpx
import pytest

from gymlab._runtime.serve import LoopServer
from gymlab.cluster.front import MAX_BODY_BYTES, front_app


class RecordingPool:
    """The part of a ``CellPool`` the door calls: the jobs it was handed, no cells."""

    cells, live, nodes = [], [], []

    def __init__(self):
        self.jobs = []

    async def apost_run(self, job, *, agent, timeout=None):
        self.jobs.append((job, agent))
        return {"reward": 1.0, "seen": job}


@pytest.fixture
def door():
    pool = RecordingPool()
    runner = LoopServer(front_app(pool, "simple_agent"), wire=True).start()
    try:
        with httpx.Client(base_url=runner.url, timeout=30) as client:
            yield client, pool
    finally:
        runner.stop()


def assert_names_all(answer: httpx.Response, status: int) -> dict:
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert body["server"] == "simple_agent" and body["route"] == "POST /run"
    assert body["detail"].startswith("simple_agent: POST /run: ") and body["hint"]
    return body


def test_a_body_past_the_servers_bound_is_a_413_before_the_pool(door):
    client, pool = door
    body = assert_names_all(client.post("/run", content=b"[" + b" " * MAX_BODY_BYTES + b"]"), 413)
    assert body["limit"] == MAX_BODY_BYTES and "max_body_bytes" in body["hint"]
    assert pool.jobs == []


@pytest.mark.parametrize(
    ("content", "cause"),
    [
        (b"[" * 200_000 + b"]" * 200_000, "nested too deeply"),
        (b'{"responses_create_params": {"input": "hi"', "not JSON"),
        (b"\xff\xfe not utf-8", "not JSON"),
        (b"", "not JSON"),
        (b'[{"input": "a row in a list"}]', "a JSON list, not an object"),
        (b'"a string"', "a JSON str, not an object"),
    ],
    ids=["nested", "torn", "binary", "empty", "list", "string"],
)
def test_what_is_not_a_json_object_is_a_422_before_the_pool(door, content, cause):
    client, pool = door
    body = assert_names_all(client.post("/run", content=content, headers={"Content-Type": "application/json"}), 422)
    assert cause in body["message"]
    assert pool.jobs == []


def test_a_non_finite_number_is_refused_as_the_servers_refuse_it(door):
    client, pool = door
    answer = client.post("/run", content=b'{"temperature": NaN}', headers={"Content-Type": "application/json"})
    assert answer.status_code == 422 and answer.json()["field"] == "body.temperature"
    assert pool.jobs == []


def test_a_row_after_hostile_ones_reaches_the_pool_whole(door):
    client, pool = door
    client.post("/run", content=b"[" * 10_000)
    row = {"responses_create_params": {"input": "hi"}, "target": 3}
    answer = client.post("/run", json=row)
    assert answer.status_code == 200 and answer.json()["seen"] == row
    assert pool.jobs == [(row, "simple_agent")]
