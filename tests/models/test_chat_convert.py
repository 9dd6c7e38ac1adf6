"""Responses <-> Chat Completions conversion on realistic payloads (tests/data/chat_completions/).

The answer fixtures follow the shapes vLLM, SGLang, Ollama, DeepSeek and OpenAI give (reasoning
fields, parallel tool calls, finish_reason "length", cached-token usage); each is checked against the
official client's ``ChatCompletion`` type, and each conversion against its strict ``Response`` type.
"""

import json
from pathlib import Path

import pytest
from openai.types.chat import ChatCompletion
from openai.types.responses import Response

from gymlab import Message, Reasoning, ResponseCreateParams
from gymlab.errors import ConversionError
from gymlab.models.chat_convert import chat_messages, chat_request, response_from_chat
from gymlab.models.openai import scrub

DATA = Path(__file__).resolve().parents[1] / "data" / "chat_completions"
ANSWERS = sorted(p.stem for p in DATA.glob("*.json") if not p.stem.startswith("responses_request"))


def _load(name):
    return json.loads((DATA / f"{name}.json").read_text())


def _params(**kw):
    return ResponseCreateParams(**{"input": "hi", **kw})


@pytest.mark.parametrize("name", ANSWERS)
def test_fixture_is_a_chat_completion_and_converts_to_a_valid_response(name):
    raw = _load(name)
    ChatCompletion.model_validate(raw)  # the fixture is what the official client accepts
    response = response_from_chat(raw, _params())
    wire = response.model_dump(mode="json", exclude_none=True)
    Response.model_validate(wire)  # strict: every required field, every item shape
    assert response.model == raw["model"] and response.created_at == raw["created"]
    assert response.usage.input_tokens == raw["usage"]["prompt_tokens"]
    assert response.usage.output_tokens == raw["usage"]["completion_tokens"]
    assert response.usage.total_tokens == raw["usage"]["total_tokens"]


def test_vllm_reasoning_and_parallel_tool_calls():
    r = response_from_chat(_load("vllm_qwen3_tool_calls_reasoning"))
    assert [i.type for i in r.output] == ["reasoning", "function_call", "function_call"]
    assert r.output[0].summary[0].text.startswith("The user wants the weather in two cities.")
    assert [(c.name, json.loads(c.arguments), c.call_id) for c in r.function_calls] == [
        ("get_weather", {"city": "Paris"}, "chatcmpl-tool-5f1e2d3c4b5a4968"),
        ("get_weather", {"city": "Tokyo"}, "chatcmpl-tool-9a8b7c6d5e4f4321"),
    ]
    assert all(c.id.startswith("fc_") and c.status == "completed" for c in r.function_calls)
    assert r.status == "completed" and r.incomplete_details is None


def test_deepseek_reasoning_content_and_reasoning_tokens():
    r = response_from_chat(_load("deepseek_reasoner_answer"))
    assert (
        isinstance(r.output[0], Reasoning)
        and r.output[0].summary[0].text == "16 squared means 16 times 16. 16 * 16 = 256."
    )
    assert isinstance(r.output[1], Message) and r.output_text == "16 squared is 256."
    assert r.usage.output_tokens_details.reasoning_tokens == 47


def test_ollama_reasoning_field_and_empty_content():
    r = response_from_chat(_load("ollama_thinking_tool_call"))
    assert [i.type for i in r.output] == ["reasoning", "function_call"]  # "" content makes no message
    assert r.function_calls[0].arguments == '{"value":7}' and r.function_calls[0].call_id == "call_k2x9f3qa"


def test_openai_length_is_incomplete_with_cached_tokens():
    r = response_from_chat(_load("openai_length_cached"))
    assert r.status == "incomplete" and r.incomplete_details == {"reason": "max_output_tokens"}
    assert r.output_text == "The Eiffel Tower was completed in 1889 and stands"
    assert r.usage.input_tokens_details.cached_tokens == 1152


def test_think_tags_in_content_become_reasoning():
    r = response_from_chat(_load("vllm_think_tags_no_parser"))
    assert r.output[0].summary[0].text == "The counter is at 2 and the target is 3, so one more increment."
    assert r.output_text == "The counter should be incremented once more."
    assert r.function_calls == []


def test_sglang_text_and_tool_call_in_one_message():
    r = response_from_chat(_load("sglang_tool_call_with_text"))
    assert [i.type for i in r.output] == ["message", "function_call"]
    assert r.output_text == "Let me increment the counter." and r.function_calls[0].name == "increment"


def test_arguments_sent_as_an_object_become_a_json_string():
    raw = _load("ollama_thinking_tool_call")
    raw["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] = {"value": 7}
    assert json.loads(response_from_chat(raw).function_calls[0].arguments) == {"value": 7}


def test_answers_that_are_not_completions_are_refused():
    with pytest.raises(ConversionError, match="no choices"):
        response_from_chat({"object": "error", "message": "model not loaded"})
    with pytest.raises(ConversionError, match="no function name"):
        response_from_chat({"choices": [{"message": {"tool_calls": [{"id": "x", "function": {}}]}}]})


def test_recorded_multiturn_request_to_chat():
    params = ResponseCreateParams.model_validate(_load("responses_request_multiturn"))
    body = chat_request(
        params, model="Qwen/Qwen3-8B", extra_body={"top_k": 20, "chat_template_kwargs": {"enable_thinking": False}}
    )
    assert body["messages"] == [
        {"role": "system", "content": "Answer with the tool's result."},
        {"role": "system", "content": "You are a calculator. Use the square tool."},
        {"role": "user", "content": "What is 4 squared?"},
        # the reasoning item is left out; the text and both calls are one assistant message
        {
            "role": "assistant",
            "content": "Let me compute that.",
            "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "square", "arguments": '{"value": 4}'}},
                {"id": "call_b", "type": "function", "function": {"name": "square", "arguments": '{"value": 5}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": '{"result": 16}'},
        {"role": "tool", "tool_call_id": "call_b", "content": '{"result": 25}'},
        {"role": "user", "content": "And the sum?"},
    ]
    assert body["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "square",
                "description": "Square an integer.",
                "strict": True,
                "parameters": {
                    "type": "object",
                    "properties": {"value": {"type": "integer"}},
                    "required": ["value"],
                    "additionalProperties": False,
                },
            },
        }
    ]
    assert body["tool_choice"] == {"type": "function", "function": {"name": "square"}}
    assert body["model"] == "Qwen/Qwen3-8B"
    assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0.6, 0.95, 512)
    assert body["reasoning_effort"] == "low"
    assert body["response_format"] == {
        "type": "json_schema",
        "json_schema": {
            "name": "answer",
            "schema": {"type": "object", "properties": {"sum": {"type": "integer"}}},
            "strict": True,
        },
    }
    assert body["top_k"] == 20 and body["chat_template_kwargs"] == {"enable_thinking": False}
    assert not {"store", "metadata", "input", "instructions", "max_output_tokens"} & set(body)


def test_request_without_tools_sends_no_tool_keys():
    body = chat_request(_params(model="from-request"))
    assert body == {"model": "from-request", "messages": [{"role": "user", "content": "hi"}]}


def test_function_call_without_preceding_text_opens_an_assistant_message():
    params = _params(
        input=[
            {"role": "user", "content": "go"},
            {"type": "function_call", "call_id": "c1", "name": "hit", "arguments": "{}"},
        ]
    )
    assert chat_messages(params, request=True)[1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "hit", "arguments": "{}"}}],
    }


@pytest.mark.parametrize(
    "kw, match",
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id has no Chat Completions form"),
        ({"input": [{"type": "web_search_call", "id": "ws_1"}]}, r"input\[0\]: item type 'web_search_call'"),
        ({"tools": [{"type": "web_search", "name": "search"}]}, r"tools\[0\]: tool type 'web_search'"),
        ({"tool_choice": "required"}, "needs tools"),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
            "content part type 'input_file'",
        ),
    ],
)
def test_requests_without_a_chat_form_are_refused(kw, match):
    with pytest.raises(ConversionError, match=match):
        chat_request(_params(**kw))


def test_image_parts_become_image_url_parts():
    params = _params(
        input=[
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "what is this?"},
                    {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"},
                ],
            }
        ]
    )
    assert chat_messages(params, request=True)[0]["content"] == [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}},
    ]


def test_scrub_removes_the_key_and_pieces_of_it():
    key = "sk-proj-Zx81ab9QwErTy7788uIoPlKj"
    text = f"Incorrect API key provided: {key}. Also sk-proj-Zx81ab9Q****PlKj and Bearer {key}"
    out = scrub(text, key)
    assert key not in out and "Zx81ab9Q" not in out
    assert out.startswith("Incorrect API key provided: ***.")
    assert scrub("nothing secret here", key) == "nothing secret here"
    assert scrub("text", None) == "text"


def test_one_converter_two_uses_a_request_drops_reasoning_a_training_row_keeps_it():
    """The same items: the request leaves reasoning out and keeps images; the training row keeps the
    reasoning on the assistant turn that follows and refuses what a text row cannot hold."""
    params = ResponseCreateParams.model_validate(_load("responses_request_multiturn"))
    request = chat_messages(params, request=True)
    row = chat_messages(params, "episode task 0")
    assert not any("reasoning_content" in m for m in request)
    assert [m for m in row if "reasoning_content" in m][0]["tool_calls"][0]["id"] == "call_a"
    assert [{k: v for k, v in m.items() if k != "reasoning_content"} for m in row] == request
    image = {"role": "user", "content": [{"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]}
    with pytest.raises(ConversionError, match=r"episode task 0\[0\]: a message has image content"):
        chat_messages(_params(input=[image]).input_items(), "episode task 0")
    with pytest.raises(ConversionError, match=r"input\[1\]: item type 'web_search_call'.*mode='responses'"):
        chat_messages(
            _params(
                instructions="be brief",
                input=[{"role": "user", "content": "hi"}, {"type": "web_search_call", "id": "w"}],
            ),
            request=True,
        )
