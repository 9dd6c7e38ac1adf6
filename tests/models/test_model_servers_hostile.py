"""Model servers under the inputs that broke them: a caller that hangs up on the proxy mid-retry, an int
past 64 bits (as a field's value and echoed in a stream), a crash whose 500 body carried file paths (and
a failed release's), and a sync policy that never returns (the process could not exit)."""

from __future__ import annotations

import json
import logging
import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx

from gymlab import OpenAIModel
from gymlab.testing.workers import wait_until
from tests.openai_upstream import OpenAIUpstream

BIG = 2**70


def _post(url: str, body: dict) -> httpx.Response:
    return httpx.post(url + "/v1/responses", content=json.dumps(body), headers={"content-type": "application/json"})


def test_the_proxy_stops_upstream_work_when_its_caller_hangs_up(lab, caplog):
    up = lab.serve(OpenAIUpstream, policy=lambda request: "hi")
    up.server.inject(fail_times=10, fail_status=503, retry_after=2.0)  # each failure asks for a 2 s wait
    proxy = lab.serve(OpenAIModel, base_url=up.url + "/v1", max_retries=5)
    caplog.set_level(logging.INFO, logger="gymlab.server")
    host, port = proxy.url.removeprefix("http://").split(":")
    body = json.dumps({"input": "hi"}).encode()
    with socket.create_connection((host, int(port))) as caller:  # a foreign client that leaves mid-answer
        caller.sendall(
            b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
        )
        wait_until(lambda: len(up.server.requests) == 1, what="the proxy's first upstream call")
    wait_until(lambda: any("hung up" in r.getMessage() for r in caplog.records), timeout=10, what="the proxy's cancel")
    assert len(up.server.requests) == 1  # the retries it was waiting to make are gone with the caller


def test_an_int_past_64_bits_is_a_422_and_a_stream_echoes_one_whole(lab):
    model = lab.serve_model(lambda request: "done")
    for field in ("max_output_tokens", "max_tool_calls", "top_logprobs"):
        answer = _post(model.url, {"input": "hi", field: BIG})
        assert answer.status_code == 422, answer.text
        assert field in answer.json()["message"]
    tools = [{"type": "function", "name": "f", "parameters": {"type": "object", "maximum": BIG}}]
    answer = _post(model.url, {"input": "hi", "stream": True, "tools": tools})  # echoed in every event
    assert answer.status_code == 200, answer.text
    assert str(BIG) in answer.text and "response.completed" in answer.text


def test_a_500_body_names_no_file_path(lab):
    def crashing(request):
        open(os.path.join(os.getcwd(), "no-such-dir", "weights.bin"))  # a path in the message, a trace of frames

    model = lab.serve_model(crashing)
    answer = _post(model.url, {"input": "hi"})
    assert answer.status_code == 500
    body = answer.json()
    assert "trace" in body and "FileNotFoundError" in body["message"]
    for folder in {os.getcwd(), str(Path(__file__).resolve().parent), str(Path(sys.prefix)), "/tmp", "site-packages"}:
        assert folder not in answer.text, folder


BLOCKED = """
import threading
from gymlab import Lab
from gymlab.examples import example_rows, load_environment

never = threading.Event()
calculator = load_environment("calculator")
with Lab() as lab:
    env = lab.serve(calculator.CalculatorServer)
    model = lab.serve_model(lambda request: never.wait())  # a sync policy that blocks forever
    agent = lab.serve_agent("simple_agent", resources=env, model=model, timeouts={"model": 1})
    run = lab.run_many(agent, example_rows("calculator")[:2], progress=False, max_retries=0)
    print("ran", len(run), flush=True)
"""


def test_a_blocked_sync_policy_never_keeps_the_process_alive():
    done = subprocess.run([sys.executable, "-c", BLOCKED], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ran 2" in done.stdout


def test_a_server_started_in_the_root_folder_keeps_its_urls_whole():
    code = "from gymlab._traces import without_paths as w; print(w('http://127.0.0.1:8000/v1 File \"/a/b/c.py\"'))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd="/")
    assert done.stdout.strip() == 'http://127.0.0.1:8000/v1 File "c.py"', done.stderr


def test_a_failed_release_answers_500_without_the_file_path_it_names(lab):
    from gymlab import BaseVerifyRequest, SimpleResourcesServer, lost_session_verification

    class Leaky(SimpleResourcesServer):
        async def close_resources_session(self, resources_session_id: str) -> None:
            open(os.path.join(os.getcwd(), "sandboxes", resources_session_id, "state.db"))

        async def verify(self, body: BaseVerifyRequest):
            return lost_session_verification(body)

    env = lab.serve(Leaky)
    seed = {"resources_session_id": "rs-1", "episode_id": {"rollout_id": "r1", "attempt": 0}, "task_data": {}}
    assert httpx.post(env.url + "/seed_session", json=seed).status_code == 200
    failed = httpx.post(env.url + "/close_session", json={"resources_session_id": "rs-1"})
    assert failed.status_code == 500 and "state.db" in failed.json()["message"]
    assert os.getcwd() not in failed.text
