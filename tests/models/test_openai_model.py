"""openai_model over real loopback HTTP, against a local OpenAI-compatible upstream (gymlab.testing).

Episodes of every example environment give the policy model's rewards through the proxy in both
modes; retries and upstream errors are answered as documented; the API key never shows up in logs,
rollouts or error bodies; the official ``openai`` client talks to gymlab's model and agent servers.
"""

import json
import logging
import secrets
import socket

import openai
import pytest
from openai.types.responses import (
    Response,
    ResponseFunctionToolCall,
    ResponseFunctionToolCallOutputItem,
    ResponseOutputMessage,
    ResponseReasoningItem,
)

from gymlab import ConfigError, Lab, OpenAIModel, ServerError
from gymlab._sync import run_sync
from gymlab.examples import example_rows, load_environment
from tests.openai_upstream import OpenAIUpstream

KEY_ENV = "GYMLAB_TEST_UPSTREAM_KEY"
MODES = ["responses", "chat_completions"]

#: example -> (server class, agent)
EXAMPLES = {
    "calculator": ("CalculatorServer", "simple_agent"),
    "counter": ("CounterServer", "simple_agent"),
    "calculator_gym": ("CalculatorEnv", "gymnasium_agent"),
    "blackjack": ("BlackjackEnv", "gymnasium_agent"),
    "qa": ("QAEnv", "gymnasium_agent"),
}


@pytest.fixture
def key(monkeypatch):
    value = f"sk-test-{secrets.token_hex(20)}"
    monkeypatch.setenv(KEY_ENV, value)
    return value


def _upstream(lab, policy, key=None, **config):
    return lab.serve(OpenAIUpstream, policy=policy, api_key=key, **config)


def _proxy(lab, upstream, mode="chat_completions", **config):
    config = {
        "base_url": upstream.url + "/v1",
        "model": "upstream-model",
        "api_key_env": KEY_ENV,
        "mode": mode,
        "backoff": 0.0,
        **config,
    }
    return lab.serve_model(openai=config, name=f"openai_model_{mode}")


def _ask(model, body):
    """POST /v1/responses to a model server; the status and the parsed body."""
    reply = run_sync(model.server.client.post(model.url, "/v1/responses", body))
    return reply.status, reply.json()


CALC_BODY = {
    "input": "What is 4 squared?",
    "tools": [
        {
            "type": "function",
            "name": "square",
            "parameters": {"type": "object", "properties": {"value": {"type": "integer"}}},
        }
    ],
}


# --- episodes: same rewards as the policy model ---------------------------------------------------


def _summary(rollout):
    calls = [(c.name, json.loads(c.arguments)) for c in rollout.response.function_calls]
    return rollout.reward, [s.reward for s in rollout.steps], calls, rollout.response.output_text


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("example", list(EXAMPLES))
def test_episodes_through_openai_model_match_the_policy_model(lab, key, example, mode):
    module = load_environment(example)
    cls_name, agent_kind = EXAMPLES[example]
    env = lab.serve(getattr(module, cls_name))
    direct = lab.serve_agent(agent_kind, resources=env, model=lab.serve_model(module.policy), name="direct")
    upstream = _upstream(lab, module.policy, key)
    proxied = lab.serve_agent(agent_kind, resources=env, model=_proxy(lab, upstream, mode), name="proxied")

    rows = example_rows(example)
    expected = [_summary(direct.run(row)) for row in rows]
    got = [_summary(proxied.run(row)) for row in rows]
    assert got == expected
    assert any(reward > 0 for reward, *_ in expected)  # the comparison is not of empty episodes
    path = "/v1/chat/completions" if mode == "chat_completions" else "/v1/responses"
    assert upstream.server.requests and all(r["path"] == path and r["authorized"] for r in upstream.server.requests)
    assert {r["body"]["model"] for r in upstream.server.requests} == {"upstream-model"}


def test_chat_mode_reasoning_becomes_items_and_is_not_sent_back(lab, key, calculator, rows):
    env = lab.serve(calculator.CalculatorServer)
    upstream = _upstream(lab, calculator.policy, key, reasoning="I should square the number.")
    agent = lab.serve_agent("simple_agent", resources=env, model=_proxy(lab, upstream))
    rollout = agent.run(rows("calculator")[0])
    assert rollout.reward == 1.0
    reasoning = [i for i in rollout.response.output if i.type == "reasoning"]
    assert [r.summary[0].text for r in reasoning] == ["I should square the number."] * 2
    # the second request carried the conversation without the reasoning (the upstream refuses unknown keys)
    second = upstream.server.requests[1]["body"]["messages"]
    assert [m["role"] for m in second] == ["system", "user", "assistant", "tool"]
    assert all("reasoning_content" not in m for m in second)


@pytest.mark.parametrize("mode", MODES)
def test_length_limit_is_an_incomplete_response(lab, key, mode):
    upstream = _upstream(lab, lambda req: "one two three four five six", key)
    status, body = _ask(_proxy(lab, upstream, mode), {"input": "count", "max_output_tokens": 3})
    assert status == 200
    assert body["status"] == "incomplete" and body["incomplete_details"] == {"reason": "max_output_tokens"}
    assert body["output"][-1]["content"][0]["text"] == "one two three"


def test_extra_body_and_model_reach_the_upstream(lab, key, calculator):
    upstream = _upstream(lab, calculator.policy, key)
    model = _proxy(lab, upstream, extra_body={"top_k": 20, "chat_template_kwargs": {"enable_thinking": False}})
    status, body = _ask(model, {**CALC_BODY, "model": "asked-for", "temperature": 0.5})
    assert status == 200 and body["output"][0]["type"] == "function_call"
    sent = upstream.server.requests[-1]["body"]
    assert sent["top_k"] == 20 and sent["chat_template_kwargs"] == {"enable_thinking": False}
    assert sent["model"] == "upstream-model" and sent["temperature"] == 0.5


# --- upstream errors and retries ------------------------------------------------------------------


def test_401_says_authentication_failed_and_names_the_env_var(lab, monkeypatch, calculator):
    wrong = f"sk-wrong-{secrets.token_hex(20)}"
    monkeypatch.setenv(KEY_ENV, wrong)
    upstream = _upstream(lab, calculator.policy, "sk-right-key-0000", echo_key_in_errors=True)
    model = _proxy(lab, upstream, max_retries=3)
    status, body = _ask(model, CALC_BODY)
    assert status == 502
    assert body["server"] == "openai_model_chat_completions" and body["route"] == "POST /v1/responses"
    assert body["upstream"]["status"] == 401 and body["upstream"]["url"] == upstream.url + "/v1/chat/completions"
    assert body["upstream"]["message"].startswith("Incorrect API key provided: ***.")
    assert f"authentication failed at {upstream.url}/v1" in body["message"] and KEY_ENV in body["message"]
    assert body["attempts"] == 1 and len(upstream.server.requests) == 1  # a 401 is not retried
    assert wrong not in json.dumps(body) and wrong[9:25] not in json.dumps(body)


def test_401_with_the_env_var_unset_says_so(lab, monkeypatch, calculator):
    monkeypatch.delenv(KEY_ENV, raising=False)
    upstream = _upstream(lab, calculator.policy, "sk-right-key-0000")
    status, body = _ask(_proxy(lab, upstream), CALC_BODY)
    assert status == 502 and body["upstream"]["status"] == 401
    assert f"the environment variable {KEY_ENV} is not set" in body["hint"]
    assert upstream.server.requests[0]["authorized"] is False


def test_401_reaches_the_agents_caller_with_the_cause(lab, monkeypatch, calculator, rows):
    monkeypatch.setenv(KEY_ENV, "sk-wrong-key-1234567890")
    upstream = _upstream(lab, calculator.policy, "sk-right-key-0000")
    env = lab.serve(calculator.CalculatorServer)
    agent = lab.serve_agent("simple_agent", resources=env, model=_proxy(lab, upstream, mode="responses"))
    with pytest.raises(ServerError, match="HTTP 401: Incorrect API key provided") as info:
        agent.run(rows("calculator")[0])
    assert "authentication failed at" in str(info.value) and KEY_ENV in str(info.value)
    assert "sk-wrong-key-1234567890" not in str(info.value)


@pytest.mark.parametrize("mode", MODES)
def test_429_then_success(lab, key, calculator, caplog, mode):
    upstream = _upstream(lab, calculator.policy, key)
    upstream.server.inject(fail_times=2, fail_status=429, retry_after=0)
    with caplog.at_level(logging.WARNING, logger="gymlab.models.openai"):
        status, body = _ask(_proxy(lab, upstream, mode, max_retries=3, backoff=5.0), CALC_BODY)
    assert status == 200 and body["output"][0]["name"] == "square"
    assert len(upstream.server.requests) == 3
    retries = [r.getMessage() for r in caplog.records if "retrying" in r.getMessage()]
    # Retry-After: 0 was honoured over the 5 s backoff
    assert len(retries) == 2 and all("HTTP 429" in m and "retrying in 0.00 s" in m for m in retries)


@pytest.mark.parametrize("fail_status, answer", [(500, 502), (503, 502), (429, 429)])
def test_persistent_failure_gives_up_after_the_retries(lab, key, calculator, fail_status, answer):
    upstream = _upstream(lab, calculator.policy, key)
    upstream.server.inject(fail_times=100, fail_status=fail_status)
    status, body = _ask(_proxy(lab, upstream, max_retries=2), CALC_BODY)
    assert status == answer
    assert body["upstream"]["status"] == fail_status and body["attempts"] == 3
    assert len(upstream.server.requests) == 3
    assert f"answered HTTP {fail_status}" in body["message"] and "after 3 attempts" in body["hint"]
    assert body["upstream"]["message"]  # the upstream's own words, not a bare status


def test_a_refused_request_passes_through_with_the_upstream_message(lab, key, calculator):
    upstream = _upstream(lab, calculator.policy, key)
    model = _proxy(lab, upstream, mode="responses", extra_body={"bogus_option": 1}, max_retries=3)
    status, body = _ask(model, CALC_BODY)
    assert status == 400 and body["upstream"]["status"] == 400
    assert body["upstream"]["message"] == "Unknown parameter: 'bogus_option'."
    assert len(upstream.server.requests) == 1  # a 400 is not retried


def test_timeout_is_retried_then_succeeds(lab, key, calculator):
    upstream = _upstream(lab, calculator.policy, key)
    upstream.server.inject(delay_s=60.0, delay_times=1)  # the delay ends when the proxy gives up
    # the retry must answer within timeout_s too: 5 s, not a fraction of one, for a loaded machine
    status, body = _ask(_proxy(lab, upstream, timeout_s=5.0, max_retries=1), CALC_BODY)
    assert status == 200 and body["output"][0]["type"] == "function_call"
    assert len(upstream.server.requests) == 2


def test_timeout_after_the_retries_is_a_504(lab, key, calculator):
    upstream = _upstream(lab, calculator.policy, key)
    upstream.server.inject(delay_s=10.0)
    status, body = _ask(_proxy(lab, upstream, timeout_s=0.2, max_retries=1), CALC_BODY)
    assert status == 504 and body["attempts"] == 2 and body["upstream"]["status"] == 0
    assert "no answer within timeout_s=0.2 s" in body["message"]


def test_unreachable_endpoint_names_the_url(lab, key):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    model = lab.serve_model(openai={"base_url": f"http://127.0.0.1:{port}/v1", "max_retries": 1, "backoff": 0})
    status, body = _ask(model, CALC_BODY)
    assert status == 502 and body["attempts"] == 2
    assert f"http://127.0.0.1:{port}/v1/responses" in body["message"] and "cannot reach" in body["message"]


def test_wrong_base_url_404_hints_at_v1(lab, key, calculator):
    upstream = _upstream(lab, calculator.policy, key)
    status, body = _ask(lab.serve_model(openai={"base_url": upstream.url, "api_key_env": KEY_ENV}), CALC_BODY)
    assert status == 502 and body["upstream"]["status"] == 404
    assert "ending in /v1" in body["hint"]


def test_unconvertible_request_is_a_400_naming_the_item(lab, key, calculator):
    upstream = _upstream(lab, calculator.policy, key)
    status, body = _ask(_proxy(lab, upstream), {"input": [{"type": "web_search_call", "id": "ws_1"}]})
    assert status == 400 and "item type 'web_search_call' has no Chat Completions form" in body["message"]
    assert upstream.server.requests == []


# --- the API key never leaks ----------------------------------------------------------------------


def test_api_key_absent_from_logs_rollouts_and_error_bodies(key, calculator, rows, caplog, capfd):
    texts = []
    with Lab(log_level="debug") as lab:
        env = lab.serve(calculator.CalculatorServer)
        good = _upstream(lab, calculator.policy, key)
        careless = _upstream(lab, calculator.policy, "sk-something-else", echo_key_in_errors=True, name="careless")
        agents = {
            mode: lab.serve_agent("simple_agent", resources=env, model=_proxy(lab, good, mode), name=f"a_{mode}")
            for mode in MODES
        }
        bad = lab.serve_model(openai={"base_url": careless.url + "/v1", "api_key_env": KEY_ENV}, name="bad_model")
        # uvicorn's loggers do not propagate to the root: listen to them too (after the last server started)
        for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "gymlab", "aiohttp"):
            logging.getLogger(name).addHandler(caplog.handler)
        caplog.set_level(logging.DEBUG)
        try:
            for agent in agents.values():
                texts.append(agent.run(rows("calculator")[0]).model_dump_json())
            good.server.inject(fail_times=1, fail_status=500)  # a retry, logged
            texts.append(json.dumps(_ask(agents["responses"], CALC_BODY)))
            good.server.inject(fail_times=5, fail_status=503)  # a final failure, logged and answered
            texts.append(
                json.dumps(
                    _ask(
                        lab.serve_model(
                            openai={
                                "base_url": good.url + "/v1",
                                "api_key_env": KEY_ENV,
                                "max_retries": 1,
                                "backoff": 0,
                            }
                        ),
                        CALC_BODY,
                    )
                )
            )
            texts.append(json.dumps(_ask(bad, CALC_BODY)))  # the upstream's 401 repeats the key
            with pytest.raises(ServerError) as info:
                lab.serve_agent("simple_agent", resources=env, model=bad, name="a_bad").run(rows("calculator")[0])
            texts.append(str(info.value))
        finally:
            for name in ("uvicorn", "uvicorn.error", "uvicorn.access", "gymlab", "aiohttp"):
                logging.getLogger(name).removeHandler(caplog.handler)
    out, err = capfd.readouterr()
    texts += [caplog.text, out, err]
    # the key was in use (so its absence means something) and the logs saw the failures
    assert all(r["authorized"] for r in good.server.requests) and careless.server.requests
    assert "HTTP 500" in caplog.text and "HTTP 401" in caplog.text and "Incorrect API key provided: ***" in caplog.text
    for text in texts:
        assert key not in text and key[8:24] not in text


def test_the_key_is_never_config():
    with pytest.raises(ConfigError, match="set api_key_env to the name") as info:
        OpenAIModel(base_url="http://x/v1", api_key="sk-secret-value-123")
    assert "sk-secret-value-123" not in str(info.value)
    with pytest.raises(ConfigError, match="NAME of an environment variable") as info:
        OpenAIModel(base_url="http://x/v1", api_key_env="sk-secret-value-123")
    assert "sk-secret-value-123" not in str(info.value)
    assert "api_key" not in OpenAIModel(base_url="http://x/v1", api_key_env=KEY_ENV).model_dump_json().replace(
        "api_key_env", ""
    )


# --- Lab.serve_model ------------------------------------------------------------------------------


def test_serve_model_openai_and_policy(lab, calculator):
    upstream = _upstream(lab, calculator.policy)
    proxy = lab.serve_model(openai={"base_url": upstream.url + "/v1", "model": "m"})
    assert isinstance(proxy.server, OpenAIModel) and proxy.name == "openai_model"
    assert proxy.server.mode == "responses" and proxy.server.model == "m"
    assert lab.serve_model(calculator.policy).name == "policy_model"
    assert _ask(proxy, CALC_BODY)[1]["output"][0]["name"] == "square"
    with pytest.raises(TypeError, match=r"one of a policy, openai=\.\.\. or hf=\.\.\."):
        lab.serve_model(calculator.policy, openai={"base_url": upstream.url + "/v1"})
    with pytest.raises(TypeError, match=r"one of a policy, openai=\.\.\. or hf=\.\.\."):
        lab.serve_model(openai={"base_url": upstream.url + "/v1"}, hf="some/path")


# --- the official openai client -------------------------------------------------------------------


@pytest.fixture
def client():
    """The official client, pointed at a gymlab server's ``/v1`` (closed after the test)."""
    opened = []

    def make(url):
        opened.append(openai.OpenAI(base_url=url + "/v1", api_key="unused-by-gymlab", max_retries=0))
        return opened[-1]

    yield make
    for c in opened:
        c.close()


@pytest.fixture(params=["policy_model", "openai_model-responses", "openai_model-chat_completions"])
def model_server(request, lab, key, calculator):
    if request.param == "policy_model":
        return lab.serve_model(calculator.policy)
    upstream = _upstream(lab, calculator.policy, key, reasoning="Square it.")
    return _proxy(lab, upstream, request.param.split("-")[1])


def test_openai_client_creates_and_parses_responses_from_model_servers(model_server, rows, client):
    row = rows("calculator")[0]["responses_create_params"]
    client = client(model_server.url)
    first = client.responses.create(model="any", input=row["input"], tools=row["tools"])
    calls = [i for i in first.output if i.type == "function_call"]
    assert len(calls) == 1 and isinstance(calls[0], ResponseFunctionToolCall)
    assert calls[0].name == "square" and json.loads(calls[0].arguments) == {"value": 4}
    assert first.usage.input_tokens > 0
    second = client.responses.create(
        model="any",
        tools=row["tools"],
        input=[
            *row["input"],
            calls[0],
            {"type": "function_call_output", "call_id": calls[0].call_id, "output": '{"result": 16}'},
        ],
    )
    assert second.output_text == "The answer is 16."
    assert any(isinstance(i, ResponseOutputMessage) for i in second.output)
    if model_server.name != "policy_model":
        # the proxy's answers pass the client's strict model too (in chat mode, reasoning items included)
        raw = client.responses.with_raw_response.create(model="any", input=row["input"], tools=row["tools"])
        strict = Response.model_validate(raw.http_response.json())
        if "chat" in model_server.name:
            assert (
                isinstance(strict.output[0], ResponseReasoningItem) and strict.output[0].summary[0].text == "Square it."
            )


def test_openai_client_errors_carry_gymlab_s_message(lab, monkeypatch, calculator, client):
    monkeypatch.setenv(KEY_ENV, "sk-wrong-key-1234567890")
    upstream = _upstream(lab, calculator.policy, "sk-right-key-0000")
    with pytest.raises(openai.APIStatusError) as info:
        client(_proxy(lab, upstream).url).responses.create(model="any", input="What is 4 squared?")
    assert info.value.status_code == 502
    assert "authentication failed at" in str(info.value) and KEY_ENV in str(info.value)


def test_openai_client_against_an_agent_runs_the_tool_loop(lab, key, calculator, rows, client):
    env = lab.serve(calculator.CalculatorServer)
    upstream = _upstream(lab, calculator.policy, key)
    agent = lab.serve_agent("simple_agent", resources=env, model=_proxy(lab, upstream))
    row = rows("calculator")[1]["responses_create_params"]
    response = client(agent.url).responses.create(model="any", input=row["input"], tools=row["tools"])
    assert [type(i) for i in response.output] == [
        ResponseFunctionToolCall,
        ResponseFunctionToolCallOutputItem,
        ResponseOutputMessage,
    ]
    call, out, _ = response.output
    assert json.loads(call.arguments) == {"value": 7} and out.call_id == call.call_id
    assert json.loads(out.output) == {"result": 49}
    assert response.output_text == "The answer is 49."
    assert response.usage.total_tokens > 0


@pytest.mark.parametrize(
    "answer", [{"error": {"message": "model overloaded"}, "output": []}, {"object": "list", "data": []}]
)
def test_a_200_that_is_not_a_response_is_an_error_not_an_empty_turn(lab, answer):
    from fastapi import FastAPI

    from gymlab._runtime.serve import ThreadedServer

    app = FastAPI()
    app.post("/v1/responses")(lambda: answer)
    odd = ThreadedServer(app, name="odd").start()
    try:
        status, body = _ask(lab.serve_model(openai={"base_url": odd.url + "/v1"}), CALC_BODY)
    finally:
        odd.stop()
    assert status == 502 and body["upstream"]["status"] == 200
    assert "the answer is not a response" in body["message"] and json.dumps(answer)[:20] in body["message"]


def test_openai_model_from_yaml(lab, key, calculator, tmp_path):
    from gymlab.collection.config import load_config

    upstream = _upstream(lab, calculator.policy, key)
    path = tmp_path / "models.yaml"
    path.write_text(f"""
policy_model:
  responses_api_models:
    openai_model:
      base_url: {upstream.url}/v1
      model: upstream-model
      api_key_env: {KEY_ENV}
      mode: chat_completions
      extra_body: {{top_k: 20}}
      max_retries: 1
""")
    spec = load_config(path).models["policy_model"]
    spec.check_fields()
    model = lab.serve(spec.build({}))
    assert isinstance(model.server, OpenAIModel) and model.name == "policy_model"
    status, body = _ask(model, CALC_BODY)
    assert status == 200 and body["output"][0]["name"] == "square"
    assert upstream.server.requests[-1]["body"]["top_k"] == 20 and upstream.server.requests[-1]["authorized"]


def test_error_bodies_have_the_shape_every_gymlab_server_answers(lab, key, calculator):
    # `detail` names the server and the route, `message` is the cause alone (gymlab.errors.error_body)
    upstream = _upstream(lab, calculator.policy, key)
    model = _proxy(lab, upstream)
    status, body = _ask(model, {"input": [{"type": "web_search_call", "id": "ws_1"}]})
    assert status == 400 and body["detail"] == f"{model.name}: POST /v1/responses: {body['message']}"
    assert body["message"].startswith("the request cannot be sent to ") and body["server"] == model.name
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    model = lab.serve_model(openai={"base_url": f"http://127.0.0.1:{port}/v1", "max_retries": 0})
    status, body = _ask(model, CALC_BODY)
    assert status == 502 and body["detail"] == f"{model.name}: POST /v1/responses: {body['message']}"
    assert body["message"].startswith(f"upstream POST http://127.0.0.1:{port}/v1/responses failed: cannot reach")
