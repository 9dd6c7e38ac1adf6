"""verl's tool config: the YAML its multi-turn rollout reads, beside a verl export (docs/export.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from gymlab.errors import ExportError
from gymlab.jsonl import write_text_atomic

#: verl's base class: loads, and answers every call with a placeholder; name your own subclass.
DEFAULT_TOOL_CLASS = "verl.tools.base_tool.BaseTool"


def tool_config(rows: list[dict[str, Any]], tool_class: str = DEFAULT_TOOL_CLASS) -> dict[str, Any] | None:
    """The tool config of verl rows (their ``extra_info.tools``), or None when no row declares a tool.
    One name declared with two different schemas is an ``ExportError`` naming it."""
    schemas: dict[str, dict[str, Any]] = {}
    for i, row in enumerate(rows, 1):
        for schema in json.loads(row["extra_info"]["tools"] or "[]"):
            name = schema["function"]["name"]
            if schemas.setdefault(name, schema) != schema:
                raise ExportError(f"row {i}: tool {name!r} is declared with two different schemas; export them apart")
    if not schemas:
        return None
    return {
        "tools": [
            {"class_name": tool_class, "config": {"type": "native"}, "tool_schema": schemas[name]}
            for name in sorted(schemas)
        ]
    }


def tool_config_path(data_path: Path) -> Path:
    """Where the tool config of data file ``data_path`` goes."""
    return data_path.with_name(data_path.stem + "_tool_config.yaml")


def write_tool_config(data_path: Path, config: dict[str, Any]) -> Path:
    import yaml

    return write_text_atomic(tool_config_path(data_path), yaml.safe_dump(config, sort_keys=False))


__all__ = ["DEFAULT_TOOL_CLASS", "tool_config", "tool_config_path", "write_tool_config"]
