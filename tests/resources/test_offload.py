"""Work off the event loop: a server answers /health while CPU-bound graders run in its worker processes;
a grader past its budget is a masked failure, an answer that breaks grading its own 0."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import time

import httpx

from gymlab.errors import AnswerError
from gymlab.protocol import BaseVerifyRequest, BaseVerifyResponse
from gymlab.resources.simple import SimpleResourcesServer
from gymlab.testing.graders import burn_until, raise_on
from gymlab.testing.workers import wait_until

BODY = {"responses_create_params": {"input": "x"}, "response": {"output": []}}


class Burner(SimpleResourcesServer):
    release: str
    started: str
    limit_s: float = 5.0

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        rounds = await self.offload(burn_until, self.release, self.started, self.limit_s)
        return BaseVerifyResponse(**body.model_dump(), reward=float(rounds > 0))


def test_health_answers_within_100ms_while_four_cpu_bound_verifies_run(lab, tmp_path):
    release, started = tmp_path / "release", tmp_path / "started"
    started.mkdir()
    server = Burner(name="burner", release=str(release), started=str(started), work_processes=4)
    url = lab.serve(server).url
    client = httpx.Client(base_url=url, timeout=30)
    assert client.get("/health").status_code == 200  # the connection open before the work starts
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        verifies = [pool.submit(httpx.post, f"{url}/verify", json=BODY, timeout=60) for _ in range(4)]
        try:
            wait_until(lambda: len(os.listdir(started)) == 4, timeout=60, what="4 graders burning")
            assert server._work.busy() == 4
            latencies = []
            for _ in range(20):
                t0 = time.perf_counter()
                assert client.get("/health").status_code == 200
                latencies.append(time.perf_counter() - t0)
            assert server._work.busy() == 4  # measured while all four still burn
        finally:
            release.touch()
        answers = [v.result() for v in verifies]
    assert max(latencies) < 0.1, [f"{t * 1000:.0f} ms" for t in latencies]
    assert [a.json()["reward"] for a in answers] == [1.0] * 4, [a.text[:200] for a in answers]


def test_a_grader_past_its_budget_is_masked_and_its_worker_replaced(lab, tmp_path):
    (tmp_path / "started").mkdir()
    server = Burner(
        name="slow", release=str(tmp_path / "never"), started=str(tmp_path / "started"), work_budget_seconds=0.5
    )
    url = lab.serve(server).url
    answer = httpx.post(f"{url}/verify", json=BODY, timeout=60).json()
    assert answer["mask_sample"] is True and answer["failure_kind"] == "verifier_error"
    assert "budget of 0.5 s" in answer["failure_reason"] and "burn_until" in answer["failure_reason"]
    server.limit_s = 0.01  # the next call gets a fresh worker and finishes in its budget
    again = httpx.post(f"{url}/verify", json=BODY, timeout=60).json()
    assert again["reward"] == 1.0, (again["failure_reason"], again["failure_kind"])


class Strict(SimpleResourcesServer):
    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        try:
            reward = await self.offload(raise_on, body.response.output_text)
        except ZeroDivisionError as exc:
            raise AnswerError(f"the grader failed on this answer: {exc!r}") from None
        return BaseVerifyResponse(**body.model_dump(), reward=reward)


class SyncCrash(SimpleResourcesServer):
    def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:  # a sync hook: run in a thread
        if "boom" in body.response.output_text:
            raise AnswerError("this answer cannot be parsed")
        return BaseVerifyResponse(**body.model_dump(), reward=1.0)


def said(text: str) -> dict:
    return {**BODY, "response": {"output": [{"type": "message", "role": "assistant", "content": text}]}}


def test_an_answer_that_breaks_grading_is_its_own_zero_never_masked(lab):
    for server in (Strict(name="strict"), SyncCrash(name="sync")):
        url = lab.serve(server).url
        assert httpx.post(f"{url}/verify", json=said("fine"), timeout=60).json()["reward"] == 1.0
        answer = httpx.post(f"{url}/verify", json=said("boom"), timeout=60)
        assert answer.status_code == 200
        graded = answer.json()
        assert graded["reward"] == 0.0 and not graded["mask_sample"] and graded["failure_kind"] is None, sorted(graded)
        assert "ZeroDivisionError" in graded["answer_error"] or "cannot be parsed" in graded["answer_error"]


def test_a_sync_hook_runs_off_the_loop_within_its_budget(lab):
    class Sleepy(SimpleResourcesServer):
        def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
            gate.wait(30)  # blocks its thread, never the loop
            return BaseVerifyResponse(**body.model_dump(), reward=1.0)

    import threading

    gate = threading.Event()
    server = Sleepy(name="sleepy", work_budget_seconds=30)
    url = lab.serve(server).url
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(httpx.post, f"{url}/verify", json=BODY, timeout=60)
        t0 = time.perf_counter()
        assert httpx.get(f"{url}/health", timeout=30).status_code == 200
        waited = time.perf_counter() - t0
        gate.set()
        assert pending.result().json()["reward"] == 1.0
    assert waited < 5
    server.work_budget_seconds = 0.2
    gate.clear()
    masked = httpx.post(f"{url}/verify", json=BODY, timeout=60).json()
    gate.set()
    assert masked["mask_sample"] and masked["failure_kind"] == "verifier_error" and "0.2 s" in masked["failure_reason"]


def test_a_caller_that_leaves_drops_its_waiting_call():
    from gymlab._runtime.offload import WorkerPool

    async def main(tmp):
        pool = WorkerPool(1, name="one")
        try:
            first = asyncio.create_task(pool.run(burn_until, str(tmp / "r"), str(tmp), 0.3, budget_s=10))
            second = asyncio.create_task(pool.run(burn_until, str(tmp / "r"), str(tmp), 30, budget_s=60))
            await asyncio.sleep(0)
            second.cancel()
            assert await first > 0
            return await asyncio.gather(second, return_exceptions=True)
        finally:
            pool.close()

    import pathlib
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        [outcome] = asyncio.run(main(pathlib.Path(tmp)))
        assert isinstance(outcome, asyncio.CancelledError)
        assert len(os.listdir(tmp)) == 1  # the dropped call never ran


def test_a_stopped_server_stops_its_workers(tmp_path):
    from gymlab import Lab
    from gymlab.testing.workers import process_gone

    (tmp_path / "started").mkdir()
    server = Burner(name="brief", release=str(tmp_path / "r"), started=str(tmp_path / "started"), limit_s=0.01)
    with Lab() as lab:
        url = lab.serve(server).url
        assert httpx.post(f"{url}/verify", json=BODY, timeout=60).json()["reward"] == 1.0
        pids = [slot.process.pid for slot in server._work._slots if slot.process is not None]
        assert pids
    assert server._work is None
    wait_until(lambda: all(process_gone(p) for p in pids), timeout=30, what="the workers stopped")


def test_a_worker_killed_midway_is_a_masked_failure_and_replaced(lab, tmp_path):
    import signal

    started = tmp_path / "started"
    started.mkdir()
    server = Burner(name="killed", release=str(tmp_path / "r"), started=str(started), limit_s=30, work_processes=1)
    url = lab.serve(server).url
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        pending = pool.submit(httpx.post, f"{url}/verify", json=BODY, timeout=60)
        wait_until(lambda: os.listdir(started), timeout=60, what="the grader started")
        os.kill(int(os.listdir(started)[0]), signal.SIGKILL)
        answer = pending.result().json()
    assert answer["mask_sample"] is True and answer["failure_kind"] == "verifier_error"
    assert "died" in answer["failure_reason"] and "exit code -9" in answer["failure_reason"], answer["failure_reason"]
    server.limit_s = 0.01
    assert httpx.post(f"{url}/verify", json=BODY, timeout=60).json()["reward"] == 1.0


def test_a_step_the_action_breaks_is_its_zero_and_a_slow_step_is_masked(lab, tmp_path):
    from gymlab.resources.gymnasium import GymnasiumServer

    (tmp_path / "started").mkdir()

    class Game(GymnasiumServer):
        def step(self, action, metadata, session_id=None):  # sync: run in a thread
            if "boom" in action.output_text:
                raise AnswerError("this move cannot be parsed")
            if "slow" in action.output_text:
                burn_until(str(tmp_path / "never"), str(tmp_path / "started"), 2.0)
            return "ok", 1.0, False, False, {}

    server = Game(name="game", work_budget_seconds=0.3)
    client = httpx.Client(base_url=lab.serve(server).url, timeout=60)

    def step(text: str) -> dict:
        client.post("/reset", json={"responses_create_params": {"input": "x"}})
        return client.post("/step", json={"responses_create_params": {"input": "x"}, **said(text)}).json()

    assert step("fine")["reward"] == 1.0
    broken = step("boom")
    assert broken["reward"] == 0.0 and broken["terminated"] and not broken["mask_sample"]
    assert broken["info"]["answer_error"] == "this move cannot be parsed"
    slow = step("slow")
    assert slow["mask_sample"] and slow["failure_kind"] == "verifier_error" and slow["truncated"], slow
    assert server.session_state == {}
