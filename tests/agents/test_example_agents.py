"""The example agents and single_agent_turn on odd rows, and where an agent's tool calls may go.

A row an agent cannot play is a 4xx naming the field, never a 5xx (rows written by hand here;
schemathesis over the example agents in tests/runtime/test_schemathesis.py). An agent's tool calls
reach its configured resources server only: a request naming another in ``x-gymlab-resources-server``
is refused and nothing reaches that URL.
"""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit

import pytest
from fastapi import FastAPI, Request

from gymlab import BaseServer, SingleAgentTurn, function_call
from gymlab.examples import example_rows, load_environment
from gymlab.lab import AgentHandle
from gymlab.protocol import RESOURCES_SERVER_HEADER

guess_number = load_environment("guess_number")
counter = load_environment("counter")


def post_raw(url: str, path: str, body: bytes, headers: dict[str, str] | None = None) -> tuple[int, dict]:
    where = urlsplit(url)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=60)
    try:
        conn.request("POST", path, body, {"Content-Type": "application/json", **(headers or {})})
        answer = conn.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        conn.close()


def game(**update):
    return {**example_rows("guess_number")[0], **update}


def without(row, key):
    return {k: v for k, v in row.items() if k != key}


@pytest.mark.parametrize(
    ("row", "field"),
    [
        (without(game(), "secret"), "secret"),
        (game(secret=None), "secret"),
        (game(secret="thirty"), "secret"),
        (game(secret=1.5), "secret"),
        (game(secret=[37]), "secret"),
        (game(max_guesses=0), "max_guesses"),
        (game(max_guesses="many"), "max_guesses"),
        (without(game(), "responses_create_params"), "responses_create_params"),
    ],
)
def test_guess_number_answers_a_row_it_cannot_play_with_422_naming_the_field(lab, row, field):
    agent = lab.serve_agent(guess_number.GuessNumberAgent, model=lab.serve_model(guess_number.policy))
    status, answer = post_raw(agent.url, "/run", json.dumps(row).encode())
    assert status == 422, answer
    assert field in answer["message"]


def test_guess_number_plays_a_good_row_and_bounds_guesses_by_max_steps(lab):
    agent = lab.serve_agent(guess_number.GuessNumberAgent, model=lab.serve_model(lambda request: "1"), max_steps=4)
    record = agent.run(game(secret=50, max_guesses=10**12))  # a limit of a trillion guesses: max_steps holds
    assert (record.reward, record.truncated, len(record.steps)) == (0.0, True, 4)
    good = lab.serve_agent(guess_number.GuessNumberAgent, model=lab.serve_model(guess_number.policy), name="g")
    assert good.run(game()).reward == 1.0


def test_a_guess_of_5000_digits_is_no_guess_not_a_crash(lab):
    agent = lab.serve_agent(guess_number.GuessNumberAgent, model=lab.serve_model(lambda request: "7" * 5000))
    record = agent.run(game(max_guesses=2))
    assert (record.reward, record.mask_sample) == (0.0, False)
    assert [s.info["guess"] for s in record.steps] == [None, None]


ODD_TASKS = [
    ({"attempt": [1]}, "attempt"),
    ({"attempt": {"n": 1}}, "attempt"),
    ({"attempt": "first"}, "attempt"),
    ({"attempt": 1e300}, "attempt"),
    ({"episode_id": {"rollout_id": 1}}, "rollout_id"),
    ({"task_id": {"taskset": "x"}}, "task_id"),
    ({"_ng_task_index": {"n": 1}}, "task_id"),
]


@pytest.mark.parametrize(("extra", "field"), ODD_TASKS, ids=range(len(ODD_TASKS)))
def test_single_agent_turn_answers_odd_episode_fields_with_422(lab, extra, field):
    env = lab.serve(counter.CounterServer)
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(counter.policy))
    turn = lab.serve(SingleAgentTurn, handle_cls=AgentHandle, resources_server=env.url, agent_server=agent.url)
    body = json.dumps({**extra, "task_input": example_rows("counter")[0]}).encode()
    status, answer = post_raw(turn.url, "/run", body)
    assert status == 422, answer
    assert answer["message"].startswith(f"single_agent_turn: invalid task: {field}: ")
    assert env.server.session_state == {}


class Victim(BaseServer):
    """A server on the agent's host that must never hear from the agent: it counts every request."""

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        self.__dict__.setdefault("heard", [])

        @app.middleware("http")
        async def hear(request: Request, call_next):
            self.__dict__["heard"].append(request.url.path)
            return await call_next(request)

        return app


def calls_a_tool(request):
    if any(i.type == "function_call_output" for i in request.input_items()):
        return "done"
    return [function_call("increment", {"by": 1})]


def responses_request(url: str, headers: dict[str, str]) -> tuple[int, dict]:
    body = json.dumps(example_rows("counter")[0]["responses_create_params"]).encode()
    return post_raw(url, "/v1/responses", body, headers)


def test_an_agent_never_sends_tool_calls_where_a_header_points(lab):
    victim = lab.serve(Victim)
    agent = lab.serve_agent("simple_agent", model=lab.serve_model(calls_a_tool))  # no resources server
    status, answer = responses_request(agent.url, {RESOURCES_SERVER_HEADER: victim.url})
    assert status == 409 and "has no resources_server" in answer["detail"]
    assert f"set resources_server: {victim.url}" in answer["detail"]
    status, answer = responses_request(agent.url, {})  # no header: the tool call has nowhere to go
    assert status == 502 and "no resources_server configured" in answer["detail"]
    env = lab.serve(counter.CounterServer)
    bound = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(calls_a_tool), name="bound")
    status, answer = responses_request(bound.url, {RESOURCES_SERVER_HEADER: victim.url})
    assert status == 409 and f"bound to resources server {env.url}" in answer["detail"]
    assert victim.server.heard == []


def test_the_configured_resources_server_is_where_an_environment_servers_episode_goes(lab):
    env = lab.serve(counter.CounterServer)
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(counter.policy))
    turn = lab.serve(SingleAgentTurn, handle_cls=AgentHandle, resources_server=env.url, agent_server=agent.url)
    record = turn.run({"task_input": example_rows("counter")[0]})
    assert (record.reward, record.mask_sample) == (1.0, False)
    assert env.server.session_state == {}
