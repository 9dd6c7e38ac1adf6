"""The session cookie is set when a session starts or changes, never again while it stays the same,
and never by servers and routes that do not use a session (an agent's /run, a model's /v1/responses)."""

from __future__ import annotations

import httpx

from gymlab.examples import example_rows

TIMEOUT = 60.0


def test_the_cookie_is_set_once_and_then_read_without_being_set_again(lab, counter):
    env = lab.serve(counter.CounterServer)
    with httpx.Client(base_url=env.url, timeout=TIMEOUT) as client:
        seeded = client.post("/seed_session", json={"initial_count": 2})
        assert seeded.status_code == 200 and seeded.headers.get("set-cookie")
        for expected in (3, 4, 5):
            reply = client.post("/increment", json={"by": 1})
            assert reply.json() == {"count": expected}  # the session was read from the cookie
            assert "set-cookie" not in reply.headers
        again = client.post("/seed_session", json={"initial_count": 0})  # same session, same cookie
        assert again.status_code == 200 and "set-cookie" not in again.headers
        assert client.post("/increment", json={"by": 1}).json() == {"count": 1}


def test_a_tampered_cookie_starts_a_new_session(lab, counter):
    env = lab.serve(counter.CounterServer)
    with httpx.Client(base_url=env.url, timeout=TIMEOUT) as client:
        seeded = client.post("/seed_session", json={"initial_count": 2})
        name, value = seeded.headers["set-cookie"].split(";")[0].split("=", 1)
        data, stamp, signature = value.rsplit(".", 2)
        good = {"cookie": f"{name}={value}"}
        assert client.post("/increment", json={"by": 1}, headers=good).json() == {"count": 3}
        tampered = {"cookie": f"{name}={data}.{stamp}.{signature[::-1]}"}
        reply = httpx.post(env.url + "/increment", json={"by": 1}, headers=tampered, timeout=TIMEOUT)
        assert reply.status_code == 404  # no counter for the new session
        assert reply.headers.get("set-cookie", "").startswith(f"{name}=")  # and its cookie


def test_agents_and_models_set_no_cookie(lab, calculator):
    env = lab.serve(calculator.CalculatorServer)
    model = lab.serve_model(calculator.policy)
    agent = lab.serve_agent("simple_agent", resources=env, model=model)
    row = example_rows("calculator")[0]
    with httpx.Client(timeout=TIMEOUT) as client:
        run = client.post(agent.url + "/run", json=row)
        assert run.status_code == 200 and run.json()["reward"] == 1.0
        assert "set-cookie" not in run.headers
        answer = client.post(model.url + "/v1/responses", json=row["responses_create_params"])
        assert answer.status_code == 200 and answer.json()["output"]
        assert "set-cookie" not in answer.headers
        loop = client.post(agent.url + "/v1/responses", json=row["responses_create_params"])
        assert loop.status_code == 200 and "set-cookie" not in loop.headers


def test_only_verified_cookie_values_are_remembered():
    """A flood of forged or garbage cookie values is read and refused, never kept: the verified-value cache
    holds only values this server signed, so hostile values cannot make it grow or push good ones out."""
    from gymlab._runtime.sessions import SessionCookie

    cookie = SessionCookie("secret", "gymlab_s")
    value = cookie.header({"session_id": "abc"}).decode().split(";")[0].split("=", 1)[1]

    def read(raw: str):
        return cookie.read({"headers": [(b"cookie", f"gymlab_s={raw}".encode())]})

    assert read(value) == {"session_id": "abc"}
    forged = SessionCookie("another secret", "gymlab_s").header({"session_id": "abc"}).decode()
    hostile = [forged.split(";")[0].split("=", 1)[1], "x" * 4000, "", "e30=.AAAA.BBBB", *(f"g{i}" for i in range(3000))]
    assert all(read(raw) is None for raw in hostile)
    assert len(cookie._verified) == 1  # only the signed value
    assert read(value) == {"session_id": "abc"}


def test_the_values_a_server_signs_are_remembered_within_the_bound():
    """What a server signs is known without verifying it, within the cache's bound: past it the least recently
    used is dropped, and read again it is verified (still good), its age checked as before."""
    from gymlab._runtime import sessions

    cookie = sessions.SessionCookie("secret", "gymlab_s")

    def read(raw: str):
        return cookie.read({"headers": [(b"cookie", f"gymlab_s={raw}".encode())]})

    values = [
        cookie.header({"session_id": f"s{i}"}).decode().split(";")[0].split("=", 1)[1]
        for i in range(sessions._CACHE_SIZE + 1)
    ]
    assert len(cookie._verified) == sessions._CACHE_SIZE and values[0] not in cookie._verified
    assert read(values[0]) == {"session_id": "s0"} and read(values[-1]) == {"session_id": f"s{sessions._CACHE_SIZE}"}
    assert len(cookie._verified) == sessions._CACHE_SIZE
    session, signed_at = cookie._verified[values[-1]]
    assert (session, signed_at) == cookie._verify(values[-1])  # remembered exactly as verifying reads it
