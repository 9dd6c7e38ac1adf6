"""SimpleResourcesServer's ``session_state``: dropped after verify, on close, on a cancelled run and by the reaper."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI, HTTPException, Request
from pydantic import BaseModel, Field, PrivateAttr

from gymlab import (
    SESSION_ID_KEY,
    BaseSeedSessionRequest,
    BaseSeedSessionResponse,
    BaseVerifyRequest,
    BaseVerifyResponse,
    Lab,
    SimpleResourcesServer,
    function_call,
)
from gymlab.resources.simple import release_gap
from gymlab.testing.workers import wait_until

TOOL = {
    "type": "function",
    "name": "guess",
    "parameters": {"type": "object", "properties": {"number": {"type": "integer"}}, "required": ["number"]},
}
PROMPT = "I am thinking of a number from 1 to 100. Find it with the guess tool, then say the number."
ROWS = [{"responses_create_params": {"input": PROMPT, "tools": [TOOL]}, "secret": s} for s in (7, 42, 99)]


class GuessSeed(BaseSeedSessionRequest):
    secret: int


class GuessArguments(BaseModel):
    number: int


class GuessVerify(BaseVerifyRequest):
    secret: int


class GuessServer(SimpleResourcesServer):
    """Notebook 02b's environment, as the tutorial writes it."""

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/guess")(self.guess)
        return app

    async def seed_session(self, request: Request, body: GuessSeed) -> BaseSeedSessionResponse:
        self.session_state[request.session[SESSION_ID_KEY]] = {"secret": body.secret, "guesses": 0}
        return BaseSeedSessionResponse()

    async def guess(self, request: Request, body: GuessArguments) -> dict:
        game = self.session_state.get(request.session[SESSION_ID_KEY])
        if game is None:
            raise HTTPException(404, "no game for this session: seed it first")
        game["guesses"] += 1
        if body.number == game["secret"]:
            return {"hint": "correct"}
        return {"hint": "higher" if body.number < game["secret"] else "lower"}

    async def verify(self, body: GuessVerify) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=float(str(body.secret) in body.response.output_text))


def bisect(request):
    low, high, last = 1, 100, None
    for item in request.input_items():
        if item.type == "function_call":
            last = json.loads(item.arguments)["number"]
        elif item.type == "function_call_output":
            hint = json.loads(item.output)["hint"]
            if hint == "correct":
                return f"The number is {last}."
            low, high = (last + 1, high) if hint == "higher" else (low, last - 1)
    return [function_call("guess", {"number": (low + high) // 2})]


def test_a_finished_run_leaves_no_state(lab):
    env = lab.serve(GuessServer)
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(bisect))
    run = lab.run_many(agent, ROWS, repeats=4)
    assert run.mean_reward == 1.0 and len(run) == 12
    assert env.server.session_state == {}  # each verify dropped its episode's game


@pytest.mark.parametrize("wire", [False, True], ids=["in-process", "wire"])
def test_an_interrupted_run_of_the_tutorial_environment_holds_no_state(wire):
    """Many episodes, cancelled midway (some finished, four holding a game, the rest not started)."""
    gate, calls, lock = threading.Event(), [0], threading.Lock()

    async def gated(request):
        with lock:
            calls[0] += 1
        if calls[0] > 240:  # a model that stops answering mid-run: the in-flight episodes hold their games
            await asyncio.to_thread(gate.wait, 60)
        return bisect(request)

    with Lab(wire=wire) as lab:
        env = lab.serve(GuessServer)
        agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(gated))
        outcome: dict = {}

        def run() -> None:
            try:
                outcome["result"] = lab.run_many(agent, ROWS, repeats=200, concurrency=4)
            except BaseException as exc:  # the test reads what the run raised
                outcome["error"] = exc

        thread = threading.Thread(target=run)
        thread.start()
        try:
            wait_until(lambda: calls[0] == 244, 120, "four episodes waiting for the model")
            assert len(env.server.session_state) == 4
            assert lab.cancel() == 1
            thread.join(60)
            assert not thread.is_alive()
        finally:
            gate.set()
        assert isinstance(outcome.get("error"), asyncio.CancelledError), outcome
        assert 0 < len(lab.last_run) < 600  # stopped midway
        wait_until(lambda: env.server.session_state == {}, 60, "every cancelled episode's game released")
        assert httpx.get(env.url + "/health").json()["sessions"]["held"] == 0


class Counted(GuessServer):
    _released: list = PrivateAttr(default_factory=list)

    async def close_resources_session(self, resources_session_id: str) -> None:
        # the state is still there when the hook runs (an external resource's handle would be in it)
        self._released.append((str(resources_session_id), resources_session_id in self.session_state))


def _seed(client: httpx.Client, url: str) -> None:
    client.post(url + "/seed_session", json={"secret": 42}).raise_for_status()


def _verify_body(**extra) -> dict:
    text = {"type": "output_text", "text": "The number is 42."}
    response = {"output": [{"type": "message", "role": "assistant", "content": [text]}]}
    return {**ROWS[1], "response": response, **extra}


def test_verify_and_close_each_release_once_with_the_state_held_for_the_hook(lab):
    env = lab.serve(Counted)
    server = env.server
    with httpx.Client() as a, httpx.Client() as b:
        _seed(a, env.url)
        answer = a.post(env.url + "/verify", json=_verify_body())
        assert answer.status_code == 200 and answer.json()["reward"] == 1.0
        assert server.session_state == {} and [held for _, held in server._released] == [True]
        _seed(b, env.url)
        assert b.post(env.url + "/verify", json=_verify_body(close_follows=True)).json()["reward"] == 1.0
        assert len(server.session_state) == 1  # a close follows: the state waits for it
        for _ in range(2):  # a repeated close releases nothing more
            assert b.post(env.url + "/close_session", json={}).status_code == 200
        assert server.session_state == {} and [held for _, held in server._released] == [True, True]


def test_the_idle_reaper_releases_a_session_nobody_closed(lab):
    env = lab.serve(Counted, session_ttl_seconds=0.5)
    with httpx.Client() as client:
        _seed(client, env.url)  # never verified nor closed
        wait_until(lambda: env.server.session_state == {}, 30, "the idle session reaped")
    assert [held for _, held in env.server._released] == [True]
    assert httpx.get(env.url + "/health").json()["sessions"]["reaped"] == 1


class Raising(GuessServer):
    _attempts: list = PrivateAttr(default_factory=list)

    async def close_resources_session(self, resources_session_id: str) -> None:
        self._attempts.append(resources_session_id in self.session_state)
        if len(self._attempts) == 1:
            raise RuntimeError("the container would not stop")


def test_a_release_that_raises_keeps_the_state_for_its_retry(lab):
    env = lab.serve(Raising)
    with httpx.Client() as client:
        _seed(client, env.url)
        reply = client.post(env.url + "/close_session", json={})
        assert reply.status_code == 500 and "the container would not stop" in reply.text
        assert len(env.server.session_state) == 1  # what the release needs (a container's handle) is not lost
        assert client.post(env.url + "/close_session", json={}).status_code == 200
        assert env.server.session_state == {} and env.server._attempts == [True, True]


def test_concurrent_verifies_and_closes_of_many_sessions_leave_nothing(lab):
    env = lab.serve(GuessServer)

    async def episode(client: httpx.AsyncClient, n: int) -> None:
        await client.post(env.url + "/seed_session", json={"secret": 42})
        await asyncio.gather(
            client.post(env.url + "/verify", json=_verify_body()),
            client.post(env.url + "/close_session", json={}),
            client.post(env.url + "/verify", json={"garbage": n}),  # malformed: 422, nothing released twice
        )

    async def main() -> None:
        clients = [httpx.AsyncClient() for _ in range(40)]
        try:
            await asyncio.gather(*(episode(c, n) for n, c in enumerate(clients)))
        finally:
            await asyncio.gather(*(c.aclose() for c in clients))

    asyncio.run(main())
    assert env.server.session_state == {}


class OwnDict(SimpleResourcesServer):
    """The old idiom: state in a private dict, freed only by verify."""

    _games: dict = PrivateAttr(default_factory=dict)

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=0.0)


class OwnDictReleased(OwnDict):
    async def close_resources_session(self, resources_session_id: str) -> None:
        self._games.pop(resources_session_id, None)


class OwnCache(OwnDict):
    """A private dict declared as no episode's state (a bounded cache)."""

    not_episode_state = ("_games",)


def test_serving_state_with_no_release_path_warns(lab):
    assert "_games" in release_gap(OwnDict()) and "self.session_state" in release_gap(OwnDict())
    with pytest.warns(UserWarning, match="OwnDict keeps per-episode state in _games"):
        lab.serve(OwnDict)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lab.serve(OwnDictReleased)
        lab.serve(GuessServer)
        lab.serve(OwnCache)
    assert release_gap(OwnCache()) is None


def test_reasoning_gyms_dataset_cache_is_not_taken_for_episode_state():
    pytest.importorskip("reasoning_gym")
    from gymlab.envs.reasoning import ReasoningGymServer

    assert release_gap(ReasoningGymServer()) is None


def test_the_references_own_idiom_works_and_its_state_goes_too(lab):
    """A server written as the spec shows (its own ``session_state`` field, popped in verify's finally)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # pydantic's "shadows an attribute" (a script sees none: below)

        class Reference(SimpleResourcesServer):
            session_state: dict[str, Any] = Field(default_factory=dict)

            async def seed_session(self, request: Request, body: GuessSeed) -> BaseSeedSessionResponse:
                self.session_state[request.session[SESSION_ID_KEY]] = {"secret": body.secret}
                return BaseSeedSessionResponse()

            async def verify(self, request: Request, body: GuessVerify) -> BaseVerifyResponse:
                try:
                    secret = self.session_state[request.session[SESSION_ID_KEY]]["secret"]
                    return BaseVerifyResponse(**body.model_dump(), reward=float(secret == body.secret))
                finally:
                    self.session_state.pop(request.session[SESSION_ID_KEY], None)

    env = lab.serve(Reference)
    with httpx.Client() as done, httpx.Client() as abandoned:
        _seed(done, env.url)
        assert done.post(env.url + "/verify", json=_verify_body()).json()["reward"] == 1.0
        _seed(abandoned, env.url)
        assert len(env.server.session_state) == 1
        assert abandoned.post(env.url + "/close_session", json={}).status_code == 200  # its verify never came
    assert env.server.session_state == {}


def test_a_script_declaring_the_references_session_state_field_sees_no_warning():
    code = (
        "from typing import Any\nfrom pydantic import Field\nfrom gymlab import SimpleResourcesServer\n"
        "class Reference(SimpleResourcesServer):\n    session_state: dict[str, Any] = Field(default_factory=dict)\n"
        "    async def verify(self, body): ...\n"
        "server = Reference()\nserver.session_state['s'] = 1\nassert server.episode_sessions.state == {'s': 1}\n"
    )
    root = str(Path(__file__).resolve().parents[2])
    done = subprocess.run(
        [sys.executable, "-W", "default", "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": root},
    )
    assert done.returncode == 0 and "shadows" not in done.stderr, done.stderr
