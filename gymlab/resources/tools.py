"""Tools and rows from a server's own routes: ``tools_from``, ``rows_from``, ``check_rows``, ``example_arguments``."""

from __future__ import annotations

import inspect
import random
import typing
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from gymlab.loop import RESERVED_ROUTES
from gymlab.server import BaseServer


def type_hints(fn: Any) -> dict[str, Any]:
    """``fn``'s resolved annotations; none when one only its own scope can resolve (left to FastAPI)."""
    try:
        return typing.get_type_hints(fn)
    except NameError:
        return {}


def _body_model(endpoint: Any) -> type[BaseModel] | None:
    """The first pydantic model among ``endpoint``'s parameter annotations: its body."""
    hints = type_hints(endpoint).items()
    return next((a for n, a in hints if n != "return" and isinstance(a, type) and issubclass(a, BaseModel)), None)


def _clean(schema: Any) -> Any:
    """A JSON schema without pydantic's ``title`` keys (models see only what matters)."""
    if isinstance(schema, dict):
        return {k: _clean(v) for k, v in schema.items() if k != "title" or not isinstance(v, str)}
    if isinstance(schema, list):
        return [_clean(v) for v in schema]
    return schema


def tools_from(server: BaseServer | type[BaseServer], *, strict: bool = True) -> list[dict[str, Any]]:
    """The function tools a server serves: one per non-lifecycle POST route (or the server's ``listed_tools``)."""
    if isinstance(server, BaseServer):
        instance = server
    else:
        try:
            instance = server()
        except Exception as exc:
            raise TypeError(
                f"tools_from({server.__name__}) needs an instance: the class cannot be built without config ({exc})"
            ) from exc
    listed = getattr(instance, "listed_tools", None)
    if callable(listed):  # tools that are not routes of its own (McpResourcesServer)
        return listed(strict=strict)
    tools = []
    for route in instance.app.routes:
        path, methods = getattr(route, "path", ""), getattr(route, "methods", None) or set()
        name = path.strip("/")
        if "POST" not in methods or not name or "/" in name or "{" in name or name in RESERVED_ROUTES:
            continue
        endpoint = getattr(route, "endpoint", None)  # a route with methods has one
        model = _body_model(endpoint)
        schema = None if model is None else model.model_json_schema()
        tools.append(function_tool(name, inspect.getdoc(endpoint) or "", schema, strict=strict))
    return tools


def function_tool(name: str, doc: str, schema: dict[str, Any] | None, *, strict: bool = True) -> dict[str, Any]:
    """A row's function tool: ``doc``'s first paragraph, ``schema`` as ``parameters``, strict unless not."""
    if schema is None:
        parameters: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
    else:
        parameters = _clean(schema)
        parameters.setdefault("type", "object")
        if strict:  # the Responses API's strict mode: every property required, no extra keys
            props = parameters.get("properties") or {}
            for prop in props.values():
                if isinstance(prop, dict):
                    prop.pop("default", None)
            parameters["required"] = list(props)
            parameters["additionalProperties"] = False
    description = doc.split("\n\n")[0].replace("\n", " ").strip()
    return {"type": "function", "name": name, "description": description, "parameters": parameters, "strict": strict}


def rows_from(
    prompts: Sequence[str],
    *,
    tools: Iterable[dict[str, Any]] | BaseServer | type[BaseServer] | None = None,
    instructions: str | None = None,
    **fields: Any,
) -> list[dict[str, Any]]:
    """Dataset rows from prompts: ``instructions``, ``tools`` on every row, each keyword a row field."""
    if isinstance(tools, (BaseServer, type)):
        tools = tools_from(tools)
    tools = list(tools or [])
    for key, value in fields.items():
        if isinstance(value, (list, tuple)) and len(value) != len(prompts):
            raise ValueError(f"{key} has {len(value)} values for {len(prompts)} prompts; give one per prompt")
    rows = []
    for i, prompt in enumerate(prompts):
        messages = [{"role": "developer", "content": instructions}] if instructions else []
        params: dict[str, Any] = {"input": [*messages, {"role": "user", "content": prompt}]}
        if tools:
            params["tools"] = tools
        row = {k: v[i] if isinstance(v, (list, tuple)) else v for k, v in fields.items()}
        rows.append({"responses_create_params": params, **row})
    return rows


@dataclass
class CheckReport:
    """What ``check_rows`` found: one line per mismatch; empty when rows and server agree."""

    server: str
    served: list[str]
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems

    def __str__(self) -> str:
        if self.ok:
            return f"{self.server}: rows and served tools agree ({', '.join(self.served) or 'no tools'})"
        return f"{self.server}: " + "; ".join(self.problems)

    def _repr_pretty_(self, p, cycle) -> None:
        p.text(str(self))


def _properties(schema: Any) -> tuple[set[str], set[str]]:
    if not isinstance(schema, dict):
        return set(), set()
    props = schema.get("properties")
    return set(props) if isinstance(props, dict) else set(), set(schema.get("required") or ())


def check_rows(server: BaseServer, rows: Iterable[dict[str, Any]]) -> CheckReport:
    """Each tool the rows declare, against the server's routes and their request models."""
    served = {t["name"]: t for t in tools_from(server)}
    report = CheckReport(server.name, sorted(served))
    seen: set[str | None] = set()
    for index, row in enumerate(rows):
        params = row.get("responses_create_params") if isinstance(row, dict) else None
        for tool in (params or {}).get("tools") or []:
            if not isinstance(tool, dict) or tool.get("type") != "function" or tool.get("name") in seen:
                continue
            name = tool.get("name")
            seen.add(name)
            where = f"row {index} tool `{name}`"
            if name not in served:
                report.problems.append(f"{where}; served: {', '.join(f'`{n}`' for n in sorted(served)) or 'none'}")
                continue
            row_props, _ = _properties(tool.get("parameters"))
            served_props, served_required = _properties(served[name]["parameters"])
            if unknown := row_props - served_props:
                report.problems.append(
                    f"{where} declares {', '.join(sorted(unknown))}, which /{name} does not take "
                    f"(it takes {', '.join(sorted(served_props)) or 'nothing'})"
                )
            if missing := served_required - row_props:
                report.problems.append(f"{where} leaves out {', '.join(sorted(missing))}, which /{name} requires")
    return report


#: Bounds on ``example_arguments`` whatever a schema asks: list items, string characters, nesting, values in all.
MAX_ITEMS, MAX_LENGTH, MAX_DEPTH, MAX_VALUES = 8, 256, 16, 256
_WORDS = ("a", "test", "value", "x", "hello", "42", "yes")


def example_arguments(schema: Any, rng: random.Random | None = None) -> Any:
    """Arguments from a tool's JSON schema, so a call reaches it: the plainest value (or a random one from
    ``rng``) within ``MAX_ITEMS``, ``MAX_LENGTH``, ``MAX_DEPTH`` and ``MAX_VALUES``; no parameters: ``{}``."""
    return _example(schema, rng, 0, [MAX_VALUES]) if schema else {}


def _example(schema: Any, rng: random.Random | None, depth: int, left: list[int]) -> Any:
    schema = schema if isinstance(schema, dict) else {}
    left[0] -= 1
    if depth > MAX_DEPTH or left[0] < 0:
        return None
    if rng is None and "default" in schema:
        return schema["default"]
    if "const" in schema:
        return schema["const"]
    pick = rng.choice if rng else (lambda options: options[0])
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return pick(schema["enum"])
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return _example(pick(schema[key]), rng, depth + 1, left)
    kind = schema.get("type")
    if isinstance(kind, list):  # ["string", "null"]: the first non-null type
        kind = next((k for k in kind if k != "null"), "null")
    kind = kind or ("object" if "properties" in schema else "string")
    if kind == "object":
        properties = schema.get("properties")
        properties = properties if isinstance(properties, dict) else {}
        return {name: _example(sub, rng, depth + 1, left) for name, sub in properties.items()}
    if kind == "array":
        least = _bounded(schema.get("minItems"), 0, MAX_ITEMS)
        n = rng.randint(least, max(least, _bounded(schema.get("maxItems"), 3, 3))) if rng else least
        return [_example(schema.get("items"), rng, depth + 1, left) for _ in range(min(n, max(left[0], 0)))]
    length = _bounded(schema.get("minLength"), 0, MAX_LENGTH)
    low, high = _number(schema.get("minimum"), 0 if rng is None else -1000), _number(schema.get("maximum"), 1000)
    if rng is None:
        return {"integer": int(low), "number": float(low), "string": "x" * length, "boolean": False}.get(kind)
    if kind == "integer":
        return rng.randint(int(low), max(int(low), int(high)))
    if kind == "number":
        return rng.uniform(low, max(low, high))
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    word = rng.choice(_WORDS).ljust(length, "x")
    most = schema.get("maxLength")
    return word[:most] if isinstance(most, int) and most >= 0 else word


def _bounded(value: Any, default: int, most: int) -> int:
    """A schema's count (``minItems``, ``minLength``) as a whole number in ``[0, most]``; not one: ``default``."""
    whole = isinstance(value, int) and not isinstance(value, bool)
    return min(max(value if whole else default, 0), most)


def _number(value: Any, default: float) -> float:
    """A schema's ``minimum``/``maximum`` as a finite number; not one: ``default``."""
    if isinstance(value, int | float) and not isinstance(value, bool) and abs(value) < 1e300:
        return value
    return default


__all__ = ["CheckReport", "check_rows", "example_arguments", "function_tool", "rows_from", "tools_from"]
