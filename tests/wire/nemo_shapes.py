"""Bodies shaped as NeMo Gym 0.7.0's agents send them, built from its real files in ``tests/data/nemo_gym``.

Its agents send all 30 ``responses_create_params`` fields (null when unset), message items with
``"phase": null``, and responses with every field of its response model. The fixtures are kept in the
repository (``tests/data/nemo_gym``, verbatim copies of the reference's output); a missing fixture fails,
never a skip.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

INTEROP = Path(__file__).resolve().parents[1] / "data" / "nemo_gym"
ROLLOUTS = INTEROP / "nemo_gym_0.7.0_rollouts.jsonl"
INPUTS = INTEROP / "nemo_gym_0.7.0_materialized_inputs.jsonl"


def fixture_rows(path: Path = ROLLOUTS) -> list[dict[str, Any]]:
    """The rows of an interop fixture file (fails, naming the path, when it is missing)."""
    if not path.exists():
        raise AssertionError(
            f"interop fixture {path.resolve()} is missing: the tests read NeMo Gym's files from {INTEROP}"
        )
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _template() -> tuple[dict[str, Any], dict[str, Any]]:
    first = fixture_rows()[0]
    return first["responses_create_params"], first["response"]


def param_fields() -> list[str]:
    """The 30 request fields, as the reference's rollout file holds them."""
    return list(_template()[0])


def nemo_item(item: dict[str, Any]) -> dict[str, Any]:
    """An item with the null fields the reference's item models add."""
    item = dict(item)
    kind = item.setdefault("type", "message")
    if kind == "message":
        item.setdefault("phase", None)
        if isinstance(item.get("content"), list):
            item["content"] = [
                {"logprobs": None, "annotations": [], **p} if p.get("type") == "output_text" else p
                for p in item["content"]
            ]
    elif kind == "function_call":
        item.setdefault("namespace", None)
    elif kind == "function_call_output":
        item.setdefault("id", None)
        item.setdefault("status", None)
    return item


def nemo_params(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` as the reference's agents send it: all 30 fields, null when unset."""
    template, _ = _template()
    out = {k: None for k in template}
    out.update(tool_choice="auto", parallel_tool_calls=True, tools=[])
    out.update(copy.deepcopy(params))
    if isinstance(out["input"], list):
        out["input"] = [nemo_item(i) for i in out["input"]]
    assert len(out) == 30, sorted(out)
    return out


def nemo_row(row: dict[str, Any]) -> dict[str, Any]:
    """A dataset row with NeMo-shaped ``responses_create_params`` (other fields as they are)."""
    return {**copy.deepcopy(row), "responses_create_params": nemo_params(row["responses_create_params"])}


def nemo_response(output: list[dict[str, Any]], tools: list[dict] | None = None) -> dict[str, Any]:
    """A response with every field of the reference's response model and its item fields."""
    _, template = _template()
    response = copy.deepcopy(template)
    response.update(output=[nemo_item(i) for i in output], tools=copy.deepcopy(tools or []))
    return response


def gymlab_response(output: list[dict[str, Any]]) -> dict[str, Any]:
    """The same response as gymlab writes it: only the fields it carries."""
    return {"id": "resp_1", "created_at": 0, "model": "m", "object": "response", "output": copy.deepcopy(output)}


def message(text: str) -> dict[str, Any]:
    return {
        "type": "message",
        "id": "msg_1",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "output_text", "text": text, "annotations": []}],
    }


def call(name: str, args: dict[str, Any], call_id: str = "call_1") -> dict[str, Any]:
    return {
        "type": "function_call",
        "name": name,
        "arguments": json.dumps(args),
        "call_id": call_id,
        "id": "fc_1",
        "status": "completed",
    }


def call_output(call_id: str, output: Any) -> dict[str, Any]:
    return {"type": "function_call_output", "call_id": call_id, "output": json.dumps(output)}
