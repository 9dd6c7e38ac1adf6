"""Tool-call arguments from a tool's JSON schema (the subset tool declarations use): the plainest valid
value, or a random one, so a probe's call reaches the tool instead of failing validation.
"""

from __future__ import annotations

import random
from typing import Any

_WORDS = ("a", "test", "value", "x", "hello", "42", "yes")


def default_arguments(schema: dict[str, Any] | None) -> Any:
    """The plainest value ``schema`` accepts: its default, its first enum value, 0, "", False, [] or {...}."""
    schema = schema or {}
    if "default" in schema:
        return schema["default"]
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return default_arguments(schema[key][0])
    kind = _type(schema)
    if kind == "object":
        props = schema.get("properties") or {}
        return {name: default_arguments(sub) for name, sub in props.items()}
    if kind == "array":
        return [default_arguments(schema["items"])] * schema.get("minItems", 0) if "items" in schema else []
    minimum = schema.get("minimum", 0)
    return {
        "integer": int(minimum),
        "number": float(minimum),
        "string": "x" * schema.get("minLength", 0),
        "boolean": False,
        "null": None,
    }.get(kind, "")


def random_arguments(schema: dict[str, Any] | None, rng: random.Random) -> Any:
    """A random value ``schema`` accepts (drawn from ``rng``, so a seeded probe repeats itself)."""
    schema = schema or {}
    if "const" in schema:
        return schema["const"]
    if schema.get("enum"):
        return rng.choice(schema["enum"])
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return random_arguments(rng.choice(schema[key]), rng)
    kind = _type(schema)
    if kind == "object":
        props = schema.get("properties") or {}
        return {name: random_arguments(sub, rng) for name, sub in props.items()}
    if kind == "array":
        least = schema.get("minItems", 0)
        n = rng.randint(least, max(least, min(3, schema.get("maxItems", 3))))
        return [random_arguments(schema.get("items"), rng) for _ in range(n)]
    low, high = schema.get("minimum", -1000), schema.get("maximum", 1000)
    if kind == "integer":
        return rng.randint(int(low), int(high))
    if kind == "number":
        return rng.uniform(float(low), float(high))
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    word = rng.choice(_WORDS).ljust(schema.get("minLength", 0), "x")
    return word[: schema["maxLength"]] if "maxLength" in schema else word


def _type(schema: dict[str, Any]) -> str:
    kind = schema.get("type")
    if isinstance(kind, list):  # ["string", "null"]: the first non-null type
        kind = next((k for k in kind if k != "null"), "null")
    if kind is None and "properties" in schema:
        kind = "object"
    return kind or "string"
