"""``stream: true`` on ``/v1/responses`` (policy and OpenAI-proxy model servers, simple_agent): the
answer is a stream of Responses events that the official openai client reads as the same response a
plain request gets. Errors come before any event; a dataset row's ``stream`` stays false-only."""

import json
import secrets
from concurrent.futures import ThreadPoolExecutor

import httpx
import openai
import pytest

from gymlab import ServerError
from tests.openai_upstream import OpenAIUpstream

KEY_ENV = "GYMLAB_TEST_UPSTREAM_KEY"
QUESTION = "What is 4 squared?"


@pytest.fixture
def lab(lab_both):
    """Every test here runs with in-process dispatch and over loopback HTTP."""
    return lab_both


def _client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url + "/v1", api_key="unused", max_retries=0, timeout=60)


def _calculator_params(rows):
    params = rows("calculator")[0]["responses_create_params"]
    return {"input": params["input"], "tools": params["tools"]}


def _shape(output):
    """What an output says, without its per-call ids."""
    said = []
    for item in output:
        item = item if isinstance(item, dict) else item.model_dump(mode="json")
        if item["type"] == "message":
            said.append(("message", "".join(p.get("text", "") for p in item["content"])))
        elif item["type"] == "function_call":
            said.append(("function_call", item["name"], json.loads(item["arguments"])))
        elif item["type"] == "function_call_output":
            said.append(("function_call_output", json.loads(item["output"])))
        else:
            said.append((item["type"],))
    return said


def test_a_policy_model_streams_the_response_it_answers(lab, calculator, rows):
    model = lab.serve_model(calculator.policy)
    client, params = _client(model), _calculator_params(rows)
    plain = client.responses.create(model="policy", **params)
    events = list(client.responses.create(model="policy", stream=True, **params))
    types = [e.type for e in events]
    assert types[:2] == ["response.created", "response.in_progress"] and types[-1] == "response.completed"
    assert [e.sequence_number for e in events] == list(range(len(events)))
    assert "response.function_call_arguments.delta" in types
    assert _shape(events[-1].response.output) == _shape(plain.output) == [("function_call", "square", {"value": 4})]
    with client.responses.stream(model="policy", **params) as stream:  # the SDK's accumulating reader
        final = stream.get_final_response()
    assert _shape(final.output) == _shape(plain.output)


def test_a_text_answer_streams_as_text_deltas(lab):
    model = lab.serve_model(lambda request: "The answer is 16.")
    client = _client(model)
    with client.responses.stream(model="policy", input=QUESTION) as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == "The answer is 16."


def test_the_openai_proxy_streams_what_its_upstream_answered(lab, calculator, rows, monkeypatch):
    key = f"sk-test-{secrets.token_hex(20)}"
    monkeypatch.setenv(KEY_ENV, key)
    upstream = lab.serve(OpenAIUpstream, policy=calculator.policy, api_key=key)
    for mode in ("responses", "chat_completions"):
        config = {"base_url": upstream.url + "/v1", "model": "up", "api_key_env": KEY_ENV, "mode": mode}
        proxy = lab.serve_model(openai=config, name=f"proxy_{mode}")
        with _client(proxy).responses.stream(model="up", **_calculator_params(rows)) as stream:
            final = stream.get_final_response()
        assert _shape(final.output) == [("function_call", "square", {"value": 4})], mode


def test_an_agent_streams_its_whole_loop(lab, calculator, rows):
    env = lab.serve(calculator.CalculatorServer)
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(calculator.policy))
    with _client(agent).responses.stream(model="policy", **_calculator_params(rows)) as stream:
        final = stream.get_final_response()
    assert _shape(final.output) == [
        ("function_call", "square", {"value": 4}),
        ("function_call_output", {"result": 16}),
        ("message", "The answer is 16."),
    ]
    assert final.usage.total_tokens > 0


def test_errors_come_before_any_event(lab, calculator, rows):
    def broken(request):
        raise RuntimeError("model crashed")

    model = lab.serve_model(broken)
    body = {**_calculator_params(rows), "stream": True}
    response = httpx.post(model.url + "/v1/responses", json=body, timeout=60)
    assert response.status_code == 500 and "model crashed" in response.text
    assert response.headers["content-type"].startswith("application/json")
    env = lab.serve(calculator.CalculatorServer)
    agent = lab.serve_agent("simple_agent", resources=env, model=model)
    response = httpx.post(agent.url + "/v1/responses", json=body, timeout=60)
    assert response.status_code == 502 and response.json()["failure"]["kind"] == "provider_unavailable"
    for bad in ({"input": QUESTION, "stream": "yes please"}, {"input": QUESTION, "stream": True, "temprature": 1}):
        response = httpx.post(model.url + "/v1/responses", json=bad, timeout=60)
        assert response.status_code == 422, response.text


def test_many_concurrent_streams_each_get_their_own_answer(lab):
    model = lab.serve_model(lambda request: f"echo: {request.input}")

    def ask(i):
        with _client(model).responses.stream(model="policy", input=f"question {i}") as stream:
            return stream.get_final_response().output_text

    with ThreadPoolExecutor(16) as pool:
        answers = list(pool.map(ask, range(48)))
    assert answers == [f"echo: question {i}" for i in range(48)]


def test_a_rows_stream_stays_false_only(lab, calculator, rows):
    env = lab.serve(calculator.CalculatorServer)
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(calculator.policy))
    row = rows("calculator")[0]
    row["responses_create_params"]["stream"] = True
    with pytest.raises(ServerError) as err:
        agent.run(row)
    assert err.value.status == 422 and "stream" in str(err.value)
