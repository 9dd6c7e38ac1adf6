"""Tool-call arguments from a tool's JSON schema (the subset tool declarations use): the plainest valid
value, or a random one, so a probe's call reaches the tool instead of failing validation.
"""

from __future__ import annotations

import random
from typing import Any

_WORDS = ("a", "test", "value", "x", "hello", "42", "yes")


def arguments(schema: dict[str, Any] | None, rng: random.Random | None = None) -> Any:
    """The plainest value ``schema`` accepts (its default, its first option, its minimum, "", False, []),
    or with ``rng`` a random one (drawn from ``rng``, so a seeded probe repeats itself)."""
    schema = schema or {}
    if rng is None and "default" in schema:
        return schema["default"]
    if "const" in schema:
        return schema["const"]
    pick = rng.choice if rng else (lambda options: options[0])
    if schema.get("enum"):
        return pick(schema["enum"])
    for key in ("anyOf", "oneOf"):
        if schema.get(key):
            return arguments(pick(schema[key]), rng)
    kind = schema.get("type")
    if isinstance(kind, list):  # ["string", "null"]: the first non-null type
        kind = next((k for k in kind if k != "null"), "null")
    kind = kind or ("object" if "properties" in schema else "string")
    if kind == "object":
        return {name: arguments(sub, rng) for name, sub in (schema.get("properties") or {}).items()}
    least = schema.get("minItems", 0)
    if kind == "array":
        n = rng.randint(least, max(least, min(3, schema.get("maxItems", 3)))) if rng else least
        return [arguments(schema.get("items"), rng) for _ in range(n)]
    if rng is None:
        low, length = schema.get("minimum", 0), schema.get("minLength", 0)
        return {"integer": int(low), "number": float(low), "string": "x" * length, "boolean": False}.get(kind)
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
