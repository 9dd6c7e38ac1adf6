"""Tool calls read back from a local model's text: the Hermes/Qwen and Llama 3 forms, transformers' own
response template, and what a degenerate model writes (repeated, nested, invalid, huge): never an error,
the text kept as written, only the calls that parse."""

from __future__ import annotations

import pytest

from gymlab.models.tool_parsers import MAX_CALLS, hermes, llama3, schema_parser, tool_parser
from gymlab.train.tiny import tiny_tokenizer

CALL = '<tool_call>\n{"name": "guess", "arguments": {"number": 7}}\n</tool_call>'
#: What degenerate models write, each about 100 KB.
DEGENERATE = {
    "repeated_open": "<tool_call>" * 9000,
    "nested": "<tool_call>{" + "[" * 50_000 + "</tool_call>",
    "nested_no_close": "<tool_call>" + "{" * 100_000,
    "invalid": "<tool_call>{not json}</tool_call>" * 3000,
    "open_close": "<tool_call></tool_call>" * 4000,
}


@pytest.fixture(scope="module")
def schema():
    from trl.chat_template_utils import add_response_schema

    return schema_parser(add_response_schema(tiny_tokenizer()))


def test_hermes_reads_calls_and_keeps_the_text_around_them():
    text, calls = hermes(f"Let me guess.\n{CALL}\n{CALL.replace('7', '8')}")
    assert text == "Let me guess."
    assert calls == [("guess", {"number": 7}), ("guess", {"number": 8})]


def test_hermes_keeps_a_block_that_does_not_parse_and_reads_the_others():
    broken = '<tool_call>{"name": "guess", "arguments": {"number": </tool_call>'
    text, calls = hermes(f"{broken}{CALL}")
    assert text == broken and calls == [("guess", {"number": 7})]
    assert hermes('<tool_call>{"arguments": {}}</tool_call>') == ('<tool_call>{"arguments": {}}</tool_call>', [])
    assert hermes('<tool_call>{"name": "x", "arguments": 3}</tool_call>')[1] == []


@pytest.mark.parametrize("kind", DEGENERATE)
def test_degenerate_text_is_text_with_no_call(kind, schema):
    written = DEGENERATE[kind]
    for parse in (hermes, llama3, schema):
        text, calls = parse(written)
        assert calls == [] and text == written.strip(), (parse, kind)


def test_a_flood_of_valid_calls_is_cut_at_max_calls():
    text, calls = hermes(CALL * 5000)
    assert len(calls) == MAX_CALLS and text.count("<tool_call>") == 5000 - MAX_CALLS


def test_llama3_reads_json_calls_and_nothing_else():
    one = '{"name": "guess", "parameters": {"number": 7}}'
    assert llama3(one) == ("", [("guess", {"number": 7})])
    assert llama3(f"<|python_tag|>{one}; {one}") == ("", [("guess", {"number": 7})] * 2)
    assert llama3(f"{one} and then some words") == (f"{one} and then some words", [])
    assert llama3("The answer is 4.") == ("The answer is 4.", [])
    assert llama3('{"name": "guess", "parameters": "' + "x" * 100_000)[1] == []


def test_the_response_template_parses_as_transformers_does(schema):
    assert schema(CALL) == ("", [("guess", {"number": 7})])
    assert schema("Just text.") == ("Just text.", [])


def test_tool_parser_names(schema):
    tok = tiny_tokenizer()
    assert tool_parser("auto", tok) is hermes  # no response template: the Qwen template's <tool_call> form
    assert tool_parser("llama3", tok) is llama3
    custom = lambda text: (text, [])  # noqa: E731
    assert tool_parser(custom, tok) is custom
    with pytest.raises(ValueError, match="tool_parser 'mistral' is not known; use one of auto, schema"):
        tool_parser("mistral", tok)
    with pytest.raises(ValueError, match="response_template"):
        tool_parser("schema", tok)
