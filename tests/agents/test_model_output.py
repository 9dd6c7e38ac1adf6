"""The model's own output, taken as an attacker writes it, over real servers.

Tool calls are bounded per answer and per episode (``max_tool_calls``); a 200 that holds no answer is
a masked ``provider_unavailable``, never a 0; an answer too large for the environment's ``/verify`` is
the policy's 0, never a masked ``verifier_error``; a lone surrogate is read (U+FFFD) from a model and
refused 422 naming the field from a client.
"""

from __future__ import annotations

import http.client
import json
from urllib.parse import urlsplit

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import Response

from gymlab import BaseServer, SingleAgentTurn, function_call
from gymlab.examples import example_rows, load_environment
from gymlab.lab import AgentHandle
from gymlab.loop import DEFAULT_MAX_TOOL_CALLS_PER_TURN

counter = load_environment("counter")


@pytest.fixture
def lab(lab_both):
    return lab_both


class CountingCounter(counter.CounterServer):
    """The counter, with the number of requests each route received."""

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        self.__dict__.setdefault("hits", {})

        @app.middleware("http")
        async def count(request: Request, call_next):
            self.__dict__["hits"][request.url.path] = self.__dict__["hits"].get(request.url.path, 0) + 1
            return await call_next(request)

        return app


class RawModel(BaseServer):
    """A model server answering 200 with the same bytes to every request."""

    answer: str = "{}"

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()

        @app.post("/v1/responses")
        async def responses() -> Response:
            return Response(self.answer, media_type="application/json")

        return app


def row(**update):
    return {**example_rows("counter")[0], **update}


def flood(n):
    """A model whose first answer is ``n`` increments at once, then a final message."""

    def policy(request):
        if any(i.type == "function_call_output" for i in request.input_items()):
            return "done"
        return [function_call("increment", {"by": 1}) for _ in range(n)]

    return policy


# -- (a) tool calls are bounded ---------------------------------------------------------------------


def test_one_answer_of_20000_calls_runs_the_per_turn_cap_and_ends_the_episode_graded(lab):
    env = lab.serve(CountingCounter)
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(flood(20_000)))
    record = agent.run(row())
    assert env.server.hits.get("/increment") == DEFAULT_MAX_TOOL_CALLS_PER_TURN  # not 20,000
    assert (record.mask_sample, record.failure_kind, record.truncated) == (False, None, True)
    assert record.model_extra["final_count"] == DEFAULT_MAX_TOOL_CALLS_PER_TURN and record.reward == 0.0
    assert record.response.status == "incomplete"
    assert record.response.incomplete_details == {"reason": "max_tool_calls"}
    (step,) = record.steps
    assert len(step.tool_outputs) == DEFAULT_MAX_TOOL_CALLS_PER_TURN and step.truncated
    assert env.server.session_state == {}


def test_concurrent_floods_and_a_notebook_episode_are_each_capped(lab):
    env = lab.serve(CountingCounter)
    model = lab.serve_model(flood(20_000))
    agent = lab.serve_agent("simple_agent", resources=env, model=model)
    records = lab.run_many(agent, [row()] * 4, concurrency=4)
    assert [(r.truncated, r.mask_sample) for r in records] == [(True, False)] * 4
    ep = lab.episode(env, row(), model=model)
    ep.seed()
    ep.run()
    record = ep.verify()
    assert record.truncated and record.response.incomplete_details == {"reason": "max_tool_calls"}
    assert env.server.hits["/increment"] == 5 * DEFAULT_MAX_TOOL_CALLS_PER_TURN
    assert env.server.session_state == {}


def test_the_requests_max_tool_calls_bounds_the_episode_across_turns(lab):
    env = lab.serve(CountingCounter)

    def one_at_a_time(request):
        return [function_call("increment", {"by": 1})]  # never stops on its own

    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(one_at_a_time))
    params = {**row()["responses_create_params"], "max_tool_calls": 2}
    record = agent.run(row(responses_create_params=params, target=2))
    assert env.server.hits.get("/increment") == 2
    assert (
        len(record.steps) == 3
        and record.truncated
        and record.response.incomplete_details["reason"] == ("max_tool_calls")
    )
    assert (record.reward, record.mask_sample) == (1.0, False)  # the count it reached is graded as it is


def test_the_agents_per_turn_cap_is_configurable_and_max_steps_still_counts_model_calls(lab):
    env = lab.serve(CountingCounter)
    agent = lab.serve_agent(
        "simple_agent", resources=env, model=lab.serve_model(flood(5)), max_tool_calls_per_turn=5, max_steps=3
    )
    record = agent.run(row(target=5))
    assert env.server.hits.get("/increment") == 5 and len(record.steps) == 2  # 5 calls ran, then "done"
    assert (record.reward, record.truncated) == (1.0, False)


# -- (b) a 200 without an answer is masked -----------------------------------------------------------

GARBAGE = [
    {"output": [{}]},
    {"output": [{"type": "message", "role": "assistant"}]},
    {"output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": None}]}]},
    {"output": [{"type": "unknown_item", "id": "x"}]},
    {"output": [], "status": "incomplete"},
    {"output": [], "status": "incomplete", "incomplete_details": {"reason": "content_filter"}},
    {"output": [{"type": "message", "role": "assistant", "content": []}]},
]


@pytest.mark.parametrize("answer", GARBAGE, ids=range(len(GARBAGE)))
def test_a_200_holding_no_answer_is_a_masked_provider_failure_never_a_zero(lab, answer):
    env = lab.serve(CountingCounter)
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve(RawModel, answer=json.dumps(answer)))
    (record,) = lab.run_many(agent, [row()])
    assert (record.mask_sample, record.failure_kind, record.failure_stage) == (True, "provider_unavailable", "agent")
    assert "the model server answered 200 with" in record.failure_reason
    assert env.server.hits.get("/verify") is None and env.server.session_state == {}


ANSWERS = [
    # the model spent its own max_output_tokens: graded as the reference grades it
    {"output": [], "status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}},
    {"output": []},  # the wire reference's empty_output: graded, marked incomplete
    {"output": [{"type": "message", "role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]}]},
    {"output": [{"type": "web_search_call"}, {"type": "message", "content": [{"type": "output_text", "text": ""}]}]},
]


@pytest.mark.parametrize("answer", ANSWERS, ids=range(len(ANSWERS)))
def test_answers_of_the_model_itself_are_graded(lab, answer):
    env = lab.serve(CountingCounter)
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve(RawModel, answer=json.dumps(answer)))
    record = agent.run(row())
    assert (record.reward, record.mask_sample, record.failure_kind) == (0.0, False, None)
    assert env.server.hits["/verify"] == 1 and env.server.session_state == {}


# -- (c) an answer too large for /verify is the policy's 0 -------------------------------------------


def test_a_9_mb_answer_is_graded_zero_not_blamed_on_the_environment(lab):
    env = lab.serve(CountingCounter)
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(lambda request: "x" * 9_000_000))
    record = agent.run(row())
    assert (record.reward, record.mask_sample, record.failure_kind) == (0.0, False, None)
    assert "413" in record.model_extra["response_too_large"]
    assert len(record.response.output_text) == 9_000_000
    assert env.server.hits["/verify"] == 1 and env.server.hits["/close_session"] == 1  # released by a close
    assert env.server.session_state == {}


def test_a_9_mb_answer_through_an_environment_server_is_graded_zero(lab):
    env = lab.serve(CountingCounter)
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(lambda request: "x" * 9_000_000))
    turn = lab.serve(SingleAgentTurn, handle_cls=AgentHandle, resources_server=env.url, agent_server=agent.url)
    record = turn.run({"task_input": row()})
    assert (record.reward, record.mask_sample, record.failure_kind) == (0.0, False, None)
    assert record.model_extra["response_too_large"]
    assert env.server.session_state == {} and len(env.server.episode_sessions) == 0


# -- (d) lone surrogates -----------------------------------------------------------------------------


def post_raw(url: str, path: str, body: bytes) -> tuple[int, dict]:
    where = urlsplit(url)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=60)
    try:
        conn.request("POST", path, body, {"Content-Type": "application/json"})
        answer = conn.getresponse()
        return answer.status, json.loads(answer.read())
    finally:
        conn.close()


def test_a_lone_surrogate_from_the_model_is_read_and_graded(lab):
    env = lab.serve(CountingCounter)
    text = '{"output":[{"type":"message","role":"assistant","content":[{"type":"output_text","text":"3 \\ud800"}]}]}'
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve(RawModel, answer=text))
    record = agent.run(row())
    assert (record.mask_sample, record.failure_kind) == (False, None)
    assert record.response.output_text == "3 \ufffd"


@pytest.mark.parametrize(
    "body",
    [
        b'{"responses_create_params":{"input":"hi \\ud800"},"target":1}',
        b'{"responses_create_params":{"input":"hi \\udc00 \\ud800x"},"target":1}',
        b'{"responses_create_params":{"input":"hi \xed\xa0\x80"},"target":1}',  # the surrogate as UTF-8 bytes
        b'{"responses_create_params":{"input":"hi"},"target":1,"\\ud800":1}',
    ],
)
def test_a_lone_surrogate_in_a_request_is_a_422_naming_the_field_never_a_500(body):
    from gymlab import Lab

    with Lab(wire=True) as lab:
        env = lab.serve(CountingCounter)
        agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(lambda request: "done"))
        for url, path in [(env.url, "/seed_session"), (env.url, "/verify"), (agent.url, "/run")]:
            status, answer = post_raw(url, path, body)
            assert status == 422, (path, answer)
            assert "lone surrogate" in answer["detail"] and answer["field"].startswith("body")
        assert env.server.session_state == {}  # the refused seed opened nothing


def test_a_surrogate_pair_is_an_ordinary_character(lab):
    env = lab.serve(CountingCounter)
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(counter.policy))
    params = row()["responses_create_params"]
    params = {**params, "input": params["input"][0]["content"] + " \U0001f600"}
    body = json.dumps(row(responses_create_params=params))
    assert "\\ud83d\\ude00" in body  # json.dumps escapes it as a UTF-16 pair
    status, record = post_raw(agent.url, "/run", body.encode())
    assert status == 200 and record["reward"] == 1.0
    assert record["responses_create_params"]["input"].endswith("\U0001f600")


def test_a_9_mb_answer_to_a_gymnasium_step_is_a_truncated_zero_and_the_session_closed(lab):
    blackjack = load_environment("blackjack")
    env = lab.serve(blackjack.BlackjackEnv)
    agent = lab.serve_agent("gymnasium_agent", resources=env, model=lab.serve_model(lambda request: "x" * 9_000_000))
    record = agent.run(example_rows("blackjack")[0])
    assert (record.reward, record.mask_sample, record.failure_kind, record.truncated) == (0.0, False, None, True)
    (step,) = record.steps
    assert "413" in step.info["response_too_large"] and step.truncated
    assert env.server.session_state == {}  # closed by the agent


def test_a_conversation_grown_past_the_model_servers_limit_ends_truncated_and_graded(lab):
    env = lab.serve(CountingCounter)

    def padded(request):  # a call whose arguments alone are 9 MB: the next model request is larger still
        if any(i.type == "function_call_output" for i in request.input_items()):
            return "done"
        return [function_call("increment", {"by": 1, "pad": "x" * 9_000_000})]

    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(padded))
    record = agent.run(row())
    assert (record.reward, record.mask_sample, record.failure_kind, record.truncated) == (0.0, False, None, True)
    assert record.response.incomplete_details == {"reason": "conversation_too_large"}
    assert "over this server's limit" in json.loads(record.steps[0].tool_outputs[0].output)["detail"]  # the tool too
    assert env.server.session_state == {}
