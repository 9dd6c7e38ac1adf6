"""Tool arguments from JSON schemas: the plainest and random values validate against their schema."""

import json
import random

import jsonschema
import pytest

from gymlab.probes.policies import answer_spray, call_every_tool, multiple_choice_options, repeat_tool_call
from gymlab.protocol import ResponseCreateParams
from gymlab.resources.tools import example_arguments as arguments

SCHEMAS = [
    {"type": "object", "properties": {}, "additionalProperties": False},
    {"type": "object", "properties": {"value": {"type": "integer"}}, "required": ["value"]},
    {
        "type": "object",
        "properties": {
            "query": {"type": "string", "minLength": 2},
            "limit": {"type": "integer", "minimum": 1, "maximum": 5},
            "mode": {"enum": ["fast", "exact"]},
            "ratio": {"type": "number", "minimum": 0, "maximum": 1},
            "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
            "flag": {"type": "boolean"},
            "maybe": {"type": ["string", "null"]},
            "nested": {"type": "object", "properties": {"x": {"const": 3}}, "required": ["x"]},
            "either": {"anyOf": [{"type": "integer"}, {"type": "string"}]},
        },
        "required": ["query", "limit", "mode", "tags", "nested"],
        "additionalProperties": False,
    },
    {"type": "object", "properties": {"n": {"type": "integer", "default": 7}}},
]


@pytest.mark.parametrize("schema", SCHEMAS)
def test_default_and_random_arguments_satisfy_the_schema(schema):
    jsonschema.validate(arguments(schema), schema)
    rng = random.Random(0)
    for _ in range(50):
        jsonschema.validate(arguments(schema, rng), schema)


def test_defaults_are_the_plainest_values():
    assert arguments(SCHEMAS[1]) == {"value": 0}
    assert arguments(SCHEMAS[3]) == {"n": 7}
    plain = arguments(SCHEMAS[2])
    assert plain["query"] == "xx" and plain["limit"] == 1 and plain["mode"] == "fast" and plain["tags"] == [""]


def test_random_arguments_repeat_with_the_seed():
    a = [arguments(SCHEMAS[2], random.Random(5)) for _ in range(2)]
    assert a[0] == a[1]
    assert arguments(SCHEMAS[2], random.Random(6)) != a[0]


def _request(text, tools=()):
    return ResponseCreateParams(input=[{"role": "user", "content": text}], tools=list(tools))


def test_spray_names_every_number_the_options_and_common_words():
    text = "Which is prime?\nA) 4\nB) 9\nC) 11"
    assert multiple_choice_options(text) == ["A", "4", "B", "9", "C", "11"]
    words = answer_spray(_request(text)).split()
    assert {"-100", "0", "42", "1000", "A", "E", "yes", "false"} <= set(words)


def test_tool_probes_call_every_declared_tool_then_answer():
    tools = [
        {"type": "function", "name": "a", "parameters": SCHEMAS[1]},
        {"type": "function", "name": "b", "parameters": SCHEMAS[0]},
    ]
    calls = call_every_tool(_request("go", tools))
    assert [(c.name, c.arguments) for c in calls] == [("a", '{"value": 0}'), ("b", "{}")]
    bare = [{"type": "function", "name": "c"}, {"type": "function", "name": "d", "parameters": {}}]
    assert [c.arguments for c in call_every_tool(_request("go", bare))] == ["{}", "{}"]  # not '' (not JSON)
    after = ResponseCreateParams(
        input=[
            {"role": "user", "content": "go"},
            {"type": "function_call", "name": "a", "arguments": "{}", "call_id": "c1"},
            {"type": "function_call_output", "call_id": "c1", "output": '{"result": 0}'},
        ],
        tools=tools,
    )
    assert call_every_tool(after) == '{"result": 0}'
    assert [c.name for c in repeat_tool_call(after)] == ["a"]  # the same call, every turn
    assert [c.name for c in repeat_tool_call(_request("go"))] == ["noop"]  # no tool: an undeclared one


def nested(depth: int) -> dict:
    schema: dict = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def nested_arrays(depth: int) -> dict:
    schema: dict = {"type": "string", "minLength": 5}
    for _ in range(depth):
        schema = {"type": "array", "minItems": 8, "items": schema}
    return schema


HOSTILE = {
    "huge minItems": {"type": "array", "items": {"type": "string"}, "minItems": 10**12},
    "huge minLength": {"type": "string", "minLength": 10**12},
    "arrays of arrays": {"type": "array", "minItems": 10**6, "items": {"type": "array", "minItems": 10**6}},
    "10,000 levels deep": nested(10_000),
    "deep anyOf": {"anyOf": [nested(5_000)]},
    "counts of the wrong type": {"type": "array", "minItems": "9" * 50, "maxItems": None, "items": True},
    "minimum above maximum": {"type": "integer", "minimum": 10**6, "maximum": 3},
    "an infinite minimum": {"type": "number", "minimum": float("inf")},
    "8 items, 16 levels deep": {"type": "array", "minItems": 8, "items": nested_arrays(15)},
    "not a schema": ["type", "string"],
    "enum and properties of the wrong type": {"enum": "abc", "properties": [1, 2]},
}


@pytest.mark.parametrize("schema", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_hostile_schema_gets_small_arguments(schema):
    """An environment's schema may ask for a huge list, a huge string or endless nesting: the arguments stay small."""
    for rng in (None, random.Random(0), random.Random(1)):
        size = len(json.dumps(arguments(schema, rng)))
        assert size < 5_000, f"{size} characters of arguments"


def test_the_bounds_keep_what_a_fair_schema_asks():
    from gymlab.resources.tools import MAX_ITEMS, MAX_LENGTH

    fair = {"type": "array", "items": {"type": "string", "minLength": MAX_LENGTH}, "minItems": MAX_ITEMS}
    jsonschema.validate(arguments(fair), fair)
    assert arguments({"type": "integer", "minimum": 10**6, "maximum": 3}, random.Random(0)) == 10**6
