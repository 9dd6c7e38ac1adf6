"""NeMo Gym 0.7.0's simple_agent and gymnasium_agent, played on the wire, get the rewards gymlab's own agents get.

Its agents talk to a resources server through aiohttp, and aiohttp sends a cookie value holding ``=``
(every signed session cookie) back in double quotes. The episodes here are driven the way its agents
drive them: the same routes in the same order, bodies with all 30 ``responses_create_params`` fields
(null when unset), message items with ``phase``, the model's whole response on ``/verify`` and each
``/step``, and the cookies kept either by a real ``aiohttp.CookieJar`` (``unsafe=True``: the servers
are on an IP address) or as its agents keep them (a ``DummyCookieJar`` session, each request given
the cookies the answers set). The servers are gymlab's example ``counter`` (stateful seed / tools /
verify) and ``blackjack`` (``/reset`` / ``/step``) on 127.0.0.1, with one worker and (the counter)
with two, so the worker router reads the quoted cookie too. The model is the environment's own
rule-based policy served by gymlab; the reference rewards come from gymlab's agents on the same rows.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import aiohttp
import httpx
import pytest

from gymlab._runtime.ownership import FORWARDED_HEADER, WORKER_HEADER
from gymlab._sync import run_sync
from gymlab.examples import environment_dir, example_rows, load_environment
from gymlab.testing.workers import serve_entrypoint
from tests.wire.nemo_shapes import nemo_item, nemo_response, nemo_row

TIMEOUT = 60.0
#: NeMo Gym's gymnasium_agent default; its simple_agent's loop is bounded the same way here.
MAX_STEPS = 10
#: How long the two-worker case may take to see a request forwarded on a loaded machine.
DEADLINE_S = 120.0


class NemoCookies:
    """The cookies one episode carries, kept as the chosen client keeps them, and what was sent."""

    def __init__(self, mode: str):
        self.mode, self.cookies, self.sent = mode, {}, []

    def session(self) -> aiohttp.ClientSession:
        # A new connection per request: with several workers each request lands on any of them.
        jar = aiohttp.CookieJar(unsafe=True) if self.mode == "jar" else aiohttp.DummyCookieJar()
        return aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(force_close=True),
            cookie_jar=jar,
            timeout=aiohttp.ClientTimeout(total=TIMEOUT),
        )

    def kwargs(self) -> dict[str, Any]:
        return {"cookies": dict(self.cookies)} if self.mode == "nemo" and self.cookies else {}

    def keep(self, reply: aiohttp.ClientResponse) -> None:
        self.sent.append(reply.request_info.headers.get("Cookie"))
        if self.mode == "nemo":  # its simple_agent: {name: morsel.value}; gymnasium_agent: the morsels
            self.cookies.update(reply.cookies)


async def _post(http, cookies: NemoCookies | None, url: str, body: Any, ok: bool = True) -> tuple[Any, dict]:
    kwargs = cookies.kwargs() if cookies is not None else {}
    async with http.post(url, json=body, **kwargs) as reply:
        text = await reply.text()
        if cookies is not None:
            cookies.keep(reply)
        assert not ok or reply.status == 200, f"POST {url}: {reply.status} {text}"
        return text, dict(reply.headers)


async def _model(http, model: str, params: dict, input_: list) -> list[dict]:
    """One model call with NeMo's body (all 30 fields); the output items as its models re-dump them."""
    text, _ = await _post(http, None, f"{model}/v1/responses", {**params, "input": input_})
    return [nemo_item(item) for item in json.loads(text)["output"]]


async def simple_agent_episode(env: str, model: str, row: dict, mode: str) -> dict:
    """simple_agent's /run: /seed_session, the model <-> tools loop, /verify with the whole trajectory."""
    cookies, body, headers = NemoCookies(mode), nemo_row(row), []
    params = body["responses_create_params"]
    async with cookies.session() as http:
        headers.append((await _post(http, cookies, f"{env}/seed_session", body))[1])
        outputs: list[dict] = []
        for _ in range(MAX_STEPS):
            output = await _model(http, model, params, params["input"] + outputs)
            outputs += output
            calls = [item for item in output if item["type"] == "function_call"]
            if not calls:
                break
            for call in calls:  # a tool's answer is the model's next input, whatever its status
                text, answer_headers = await _post(
                    http, cookies, f"{env}/{call['name']}", json.loads(call["arguments"]), ok=False
                )
                headers.append(answer_headers)
                outputs.append(nemo_item({"type": "function_call_output", "call_id": call["call_id"], "output": text}))
        response = nemo_response(outputs, params["tools"])
        text, verify_headers = await _post(http, cookies, f"{env}/verify", {**body, "response": response})
        headers.append(verify_headers)
    return {"verify": json.loads(text), "sent": cookies.sent, "headers": headers}


async def gymnasium_agent_episode(env: str, model: str, row: dict, mode: str) -> dict:
    """gymnasium_agent's /run: /reset, then model call and /step until terminated or truncated."""
    cookies, body = NemoCookies(mode), nemo_row(row)
    params = body["responses_create_params"]
    async with cookies.session() as http:
        reset = json.loads((await _post(http, cookies, f"{env}/reset", body))[0])
        base = params["input"] + [nemo_item({"role": "user", "content": reset["observation"]})]
        outputs, steps = [], []
        for _ in range(MAX_STEPS):
            output = await _model(http, model, params, base + outputs)
            outputs += output
            text, _ = await _post(http, cookies, f"{env}/step", {**body, "response": nemo_response(output)})
            step = json.loads(text)
            steps.append(step)
            if step["terminated"] or step["truncated"]:
                break
            for tool in (step.get("info") or {}).get("tool_outputs", []):
                outputs.append(
                    nemo_item({"type": "function_call_output", "call_id": tool["call_id"], "output": tool["output"]})
                )
            if step.get("observation"):
                outputs.append(nemo_item({"role": "user", "content": step["observation"]}))
        if (reset.get("info") or {}).get("supports_explicit_close") is True:
            await _post(http, cookies, f"{env}/close", {})
    return {"reward": sum(s["reward"] for s in steps), "steps": steps, "sent": cookies.sent}


def gymlab_rewards(agent_url: str, rows: list[dict]) -> list[float]:
    """The rewards gymlab's own agent gets on ``rows`` (each checked graded, not masked)."""
    rewards = []
    with httpx.Client(timeout=TIMEOUT) as client:
        for row in rows:
            reply = client.post(f"{agent_url}/run", json=row)
            assert reply.status_code == 200, reply.text
            rollout = reply.json()
            assert not rollout.get("mask_sample"), rollout
            rewards.append(rollout["reward"])
    return rewards


def quoted(sent: list[str | None]) -> bool:
    """Whether the client sent the session cookie's value in double quotes (what the test is about)."""
    return any(header and '="' in header for header in sent)


@pytest.mark.parametrize("mode", ["jar", "nemo"])
def test_simple_agent_drives_the_counter_with_gymlab_rewards(lab, mode):
    counter = load_environment("counter")
    env = lab.serve(counter.CounterServer)
    model = lab.serve_model(counter.policy)
    rows = example_rows("counter")
    expected = gymlab_rewards(lab.serve_agent("simple_agent", resources=env, model=model).url, rows)
    assert expected == [1.0] * len(rows)  # the policy reaches every target

    async def episodes():
        return [await simple_agent_episode(env.url, model.url, row, mode) for row in rows]

    played = run_sync(episodes())
    assert all(quoted(p["sent"]) for p in played), [p["sent"] for p in played]
    verifies = [p["verify"] for p in played]
    assert [v.get("mask_sample", False) for v in verifies] == [False] * len(rows), verifies
    assert [v["reward"] for v in verifies] == expected
    assert [v["final_count"] for v in verifies] == [row["target"] for row in rows]


@pytest.mark.parametrize("mode", ["jar", "nemo"])
def test_gymnasium_agent_drives_blackjack_with_gymlab_rewards(lab, mode):
    blackjack = load_environment("blackjack")
    env = lab.serve(blackjack.BlackjackEnv)
    model = lab.serve_model(blackjack.policy)
    rows = example_rows("blackjack")
    expected = gymlab_rewards(lab.serve_agent("gymnasium_agent", resources=env, model=model).url, rows)

    async def episodes():
        return [await gymnasium_agent_episode(env.url, model.url, row, mode) for row in rows]

    played = run_sync(episodes())
    assert all(quoted(p["sent"]) for p in played if len(p["steps"]) > 0)
    for p in played:  # every hand played to its end in its own session: no step lost it
        assert [(s["mask_sample"], s["failure_kind"]) for s in p["steps"]] == [(False, None)] * len(p["steps"])
        assert p["steps"][-1]["terminated"], p["steps"]
    assert [p["reward"] for p in played] == expected
    assert any(len(p["steps"]) > 1 for p in played)  # some hand took a hit: the cookie was read back


def _forwarded(played: list[dict]) -> bool:
    """Some request of some episode reached a worker that does not own its session (forwarded)."""
    return any(FORWARDED_HEADER.decode() in h for p in played for h in p["headers"])


@pytest.mark.parametrize("mode", ["jar", "nemo"])
def test_simple_agent_drives_a_two_worker_counter(lab, mode):
    """The worker router and the session middleware read the same quoted cookie: every request of a
    session runs in the worker that owns it, forwarded there when it lands on the other."""
    counter = load_environment("counter")
    rows = example_rows("counter")
    model = lab.serve_model(counter.policy)
    with serve_entrypoint(environment_dir("counter") / "app.py", workers=2) as served:

        async def until_forwarded() -> list[dict]:
            played: list[dict] = []
            deadline = time.monotonic() + DEADLINE_S
            while not _forwarded(played):  # on a busy machine one worker may accept a whole batch
                assert time.monotonic() < deadline, "no request was ever forwarded between the two workers"
                played += await asyncio.gather(*(simple_agent_episode(served.url, model.url, r, mode) for r in rows))
            return played

        played = run_sync(until_forwarded())
    assert all(quoted(p["sent"]) for p in played)
    assert all(p["verify"]["reward"] == 1.0 and not p["verify"].get("mask_sample") for p in played), [
        p["verify"] for p in played
    ]
    for p in played:  # one worker answered every request of the episode
        assert len({h.get(WORKER_HEADER.decode()) for h in p["headers"]}) == 1, p["headers"]
