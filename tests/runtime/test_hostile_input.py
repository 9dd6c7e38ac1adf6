"""Malformed or oversized input is answered with a JSON 4xx naming server, route and field, never a 500,
over real loopback servers."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import pytest

from gymlab.examples import load_environment

MB = 1024 * 1024


@pytest.fixture
def counter_env(lab):
    return lab.serve(load_environment("counter").CounterServer)


@pytest.fixture
def blackjack_env(lab):
    return lab.serve(load_environment("blackjack").BlackjackEnv)


def seed_body(sid: str) -> dict:
    return {"resources_session_id": sid, "episode_id": {"rollout_id": "r", "attempt": 0}, "task_data": {}}


@pytest.mark.parametrize(
    ("path", "limit", "setting"),
    [("/verify", 8 * MB, "max_body_bytes"), ("/aggregate_metrics", 32 * MB, "max_metrics_body_bytes")],
)
def test_a_300_mb_streamed_post_gets_413_before_it_is_read(counter_env, path, limit, setting):
    """A chunked 300 MB POST, streamed while the answer is read (as a careful client does: a server
    that answers early and closes may reset the connection, which drops unread answer bytes).
    ``/aggregate_metrics`` takes a whole run's verify answers, so its own bound is larger, not absent."""
    host, port = counter_env.url.removeprefix("http://").split(":")

    async def post() -> tuple[bytes, bytes, int]:
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            b"POST %s HTTP/1.1\r\nHost: gymlab\r\nContent-Type: application/json\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n" % path.encode()
        )
        head = asyncio.ensure_future(reader.readuntil(b"\r\n\r\n"))
        chunk, sent = b"%x\r\n" % MB + b"x" * MB + b"\r\n", 0
        for _ in range(300):
            if head.done():
                break
            writer.write(chunk)
            try:
                await writer.drain()
            except ConnectionError:
                break
            sent += MB
            # drain() returns without yielding while the server keeps reading (it discards the rest of
            # the body after its 413), so let the loop run the answer's reader between chunks.
            await asyncio.sleep(0)
        header = await asyncio.wait_for(head, 20)
        length = int(header.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        body = await asyncio.wait_for(reader.readexactly(length), 20)
        writer.close()
        return header, body, sent

    started = time.monotonic()
    header, body, sent = asyncio.run(post())
    answer = json.loads(body)
    assert header.startswith(b"HTTP/1.1 413")
    assert answer["server"] == "counter_server" and answer["route"] == f"POST {path}"
    assert answer["limit"] == limit and setting in answer["hint"]
    assert sent < 100 * MB, f"the client streamed {sent // MB} MB before the answer"
    assert time.monotonic() - started < 20
    assert httpx.get(counter_env.url + "/health", timeout=10).status_code == 200


def test_a_declared_content_length_over_the_limit_is_refused_up_front(lab):
    env = lab.serve(load_environment("counter").CounterServer, max_body_bytes=1000)
    reply = httpx.post(
        env.url + "/seed_session", content=b"{" + b" " * 2000 + b"}", headers={"content-type": "application/json"}
    )
    assert reply.status_code == 413
    assert reply.json()["message"] == "the request body (2002 bytes) is over this server's limit of 1000 bytes"
    assert httpx.post(env.url + "/seed_session", json={"initial_count": 1}).status_code == 200


def test_an_overlong_resources_session_id_is_a_422_naming_the_field(counter_env):
    for path in ("/seed_session", "/close_session"):
        reply = httpx.post(
            counter_env.url + path,
            json={**seed_body("x" * 257)} if path == "/seed_session" else {"resources_session_id": "x" * 257},
        )
        assert reply.status_code == 422, reply.text
        assert "resources_session_id" in reply.json()["message"] and "256" in reply.json()["message"]
        assert "set-cookie" not in reply.headers or len(reply.headers["set-cookie"]) < 400
    assert httpx.post(counter_env.url + "/seed_session", json=seed_body("x" * 256)).status_code == 200


@pytest.mark.parametrize("path", ["/verify", "/step"])
def test_an_item_with_a_dict_type_is_a_422(counter_env, blackjack_env, path):
    url = (counter_env if path == "/verify" else blackjack_env).url
    body = {"responses_create_params": {"input": [{"type": {}}]}, "response": {"output": [{"type": {}}]}, "target": 1}
    reply = httpx.post(url + path, json=body)
    assert reply.status_code == 422, reply.text
    assert "type" in reply.json()["message"] and reply.json()["route"] == f"POST {path}"


def test_blackjack_close_with_a_null_id_closes_the_cookies_session(blackjack_env):
    with httpx.Client(base_url=blackjack_env.url) as client:
        client.post("/reset", json={"responses_create_params": {"input": []}, "seed": 1})
        (sid,) = blackjack_env.server.session_state
        reply = client.post("/close_session", json={"resources_session_id": None})
        assert reply.status_code == 200 and reply.json() == {"resources_session_id": sid}
        assert blackjack_env.server.session_state == {}


@pytest.mark.parametrize("constant", ["NaN", "Infinity", "-Infinity"])
def test_nan_and_infinity_are_a_422_naming_the_field(counter_env, constant):
    raw = '{"responses_create_params": {"input": [], "temperature": CONST}, "response": {"output": []}, "target": 1}'
    raw = raw.replace("CONST", constant)
    reply = httpx.post(counter_env.url + "/verify", content=raw, headers={"content-type": "application/json"})
    assert reply.status_code == 422, reply.text
    assert reply.json()["field"] == "body.responses_create_params.temperature"
    assert reply.json()["message"].startswith("body.responses_create_params.temperature: NaN and Infinity")
    bad_type = httpx.post(
        counter_env.url + "/verify", content='{"target": "NaN"}', headers={"content-type": "application/json"}
    )
    assert bad_type.status_code == 422  # the string "NaN" is no constant: ordinary validation answers


@pytest.mark.parametrize("path", ["/seed_session", "/close_session", "/verify", "/increment"])
def test_deeply_nested_json_is_a_json_400(counter_env, path):
    raw = '{"resources_session_id": ' + "[" * 100_000 + "]" * 100_000 + "}"
    reply = httpx.post(counter_env.url + path, content=raw, headers={"content-type": "application/json"})
    assert reply.status_code == 400, reply.text
    assert reply.json()["message"] == "the body is not JSON this server can parse (malformed, or nested too deeply)"
    assert reply.json()["route"] == f"POST {path}"


def test_aggregate_metrics_takes_a_whole_run_past_the_episode_body_limit(lab):
    """A run's verify answers can pass the episode routes' limit; /aggregate_metrics has its own."""
    env = lab.serve(load_environment("counter").CounterServer, max_body_bytes=10_000)
    answers = [
        {"reward": float(i % 2), "mask_sample": False, "_ng_task_index": i, "pad": "x" * 100} for i in range(500)
    ]
    reply = httpx.post(env.url + "/aggregate_metrics", json={"verify_responses": answers}, timeout=60)
    assert reply.status_code == 200 and reply.json()["agent_metrics"]["num_samples"] == 500
    too_big = httpx.post(
        env.url + "/seed_session", content=b"{" + b" " * 20_000 + b"}", headers={"content-type": "application/json"}
    )
    assert too_big.status_code == 413 and "max_body_bytes" in too_big.json()["hint"]


def test_an_int_past_64_bits_keeps_its_value_through_an_agent(lab):
    """orjson reads an int past 64 bits as a float, which an int field then refuses: the record of a
    row with ``top_logprobs`` 10**30 came back a 500 before every JSON reader took such ints whole. Where
    any value goes (``metadata``) such an int keeps its value; where an int is expected it is a 422 naming
    the field (a model server answered 500 "Integer exceeds 64-bit range" to one)."""
    model = lab.serve_model(lambda request: "done")
    env = lab.serve(load_environment("counter").CounterServer)
    agent = lab.serve_agent("simple_agent", resources=env, model=model, max_steps=2)
    row = {"responses_create_params": {"input": "hi", "metadata": {"n": 10**30}}, "target": 0}
    reply = httpx.post(agent.url + "/run", json=row, timeout=60)
    assert reply.status_code == 200, reply.text
    assert reply.json()["responses_create_params"]["metadata"]["n"] == 10**30
    row["responses_create_params"]["top_logprobs"] = 10**30
    reply = httpx.post(agent.url + "/run", json=row, timeout=60)
    assert reply.status_code == 422 and "responses_create_params.top_logprobs" in reply.json()["message"]


def test_what_the_guard_parses_is_what_the_session_layer_and_the_route_read(counter_env):
    """The guard parses a JSON body once for every layer: a seed naming its session through an escaped key is
    the episode seed the plain key makes, its cookie set (an int past 64 bits: the test above)."""
    escaped = json.dumps(seed_body("esc-1")).replace('"resources_session_id"', '"\\u0072esources_session_id"')
    with httpx.Client(base_url=counter_env.url, timeout=60) as client:
        reply = client.post("/seed_session", content=escaped, headers={"content-type": "application/json"})
        assert reply.status_code == 200, reply.text
        assert reply.json()["resources_session_id"] == "esc-1" and reply.headers.get("set-cookie")
