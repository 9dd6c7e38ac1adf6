"""A request whose handler never reads or writes the session gets no session cookie (the rule worker
routing uses to decide ownership), with one worker and with several."""

from __future__ import annotations

import httpx

from gymlab.examples import environment_dir, example_rows, load_environment
from gymlab.testing.workers import serve_entrypoint

TIMEOUT = 60.0


def set_cookie(reply: httpx.Response) -> str | None:
    assert reply.status_code == 200, f"{reply.request.url.path}: {reply.status_code} {reply.text}"
    return reply.headers.get("set-cookie")


def test_square_sets_no_cookie_with_one_worker(lab):
    calc = lab.serve(load_environment("calculator").CalculatorServer)
    counter = lab.serve(load_environment("counter").CounterServer)
    with httpx.Client(base_url=calc.url, timeout=TIMEOUT) as client:
        assert set_cookie(client.post("/square", json={"value": 3})) is None
        assert set_cookie(client.get("/health")) is None
        assert set_cookie(client.post("/aggregate_metrics", json={"verify_responses": []})) is None
        assert set_cookie(client.post("/seed_session", json=example_rows("calculator")[0])) is not None
        assert set_cookie(client.post("/square", json={"value": 3})) is None  # the cookie stays as it was
    with httpx.Client(base_url=counter.url, timeout=TIMEOUT) as client:
        # A tool whose handler takes the Request can see the session: it gets one.
        reply = client.post("/increment", json={"by": 1})
        assert reply.status_code == 404 and reply.headers.get("set-cookie")


def test_square_sets_no_cookie_with_two_workers():
    with serve_entrypoint(environment_dir("calculator") / "app.py", workers=2) as served:
        with httpx.Client(base_url=served.url, timeout=TIMEOUT) as client:
            for value in range(8):  # lands on both workers
                reply = client.post("/square", json={"value": value})
                assert set_cookie(reply) is None and reply.json() == {"result": value**2}
            assert "x-gymlab-worker" not in reply.headers  # no ownership taken
            assert set_cookie(client.post("/seed_session", json=example_rows("calculator")[0])) is not None
