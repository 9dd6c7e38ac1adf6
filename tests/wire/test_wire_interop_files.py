"""NeMo Gym 0.7.0's own rollout file loads as records, frames and exports like a gymlab run."""

from __future__ import annotations

import json

import httpx

import gymlab
from gymlab.examples import example_rows, load_environment
from gymlab.lab.runs import Rollouts
from gymlab.protocol import ResponseCreateParams
from tests.wire.nemo_shapes import INPUTS, ROLLOUTS, fixture_rows


def test_reference_rollouts_load_as_records():
    rows = fixture_rows(ROLLOUTS)
    records = gymlab.load(ROLLOUTS)
    assert isinstance(records, Rollouts) and len(records) == len(rows) == 2
    for record, row in zip(records, rows):
        assert record.reward == row["reward"] and record.task_index == row["_ng_task_index"]
        assert record.agent == row["agent_ref"]["name"]
        # The 30 request fields and the items' own keys (phase, namespace) survive.
        assert set(record.responses_create_params.model_fields_set) >= {"context_management", "stream_options"}
        assert record.responses_create_params.input[0].model_extra == {"phase": None}
        assert record.response.output[-1].text == "It is cold in SF."


def test_reference_rollouts_frame_like_any_run():
    records = Rollouts(gymlab.load(ROLLOUTS))
    episodes = records.episodes
    assert list(episodes["reward"]) == [1.0, 1.0]
    assert list(episodes["agent"]) == ["example_single_tool_call_simple_agent"] * 2
    assert list(episodes["total_tokens"]) == [30, 30]
    assert list(records.steps.columns)[:2] == ["episode", "step"]  # NeMo records carry no per-step records
    assert records.mean_reward == 1.0


def test_reference_rollouts_export_sft(tmp_path):
    path = gymlab.export_sft(gymlab.load(ROLLOUTS), tmp_path / "sft.jsonl")
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len(rows) == 2
    roles = [m["role"] for m in rows[0]["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "assistant"]
    assert rows[0]["messages"][-1]["content"] == "It is cold in SF."
    assert rows[0]["tools"][0]["function"]["name"] == "get_weather"


def test_reference_materialized_inputs_load_as_rows():
    rows = gymlab.load(INPUTS)
    assert len(rows) == 2
    for row in rows:
        params = row["responses_create_params"] if isinstance(row, dict) else row.responses_create_params
        ResponseCreateParams.model_validate(params)


def test_unknown_request_key_is_still_refused_by_name(lab):
    calc = lab.serve(load_environment("calculator").CalculatorServer)
    row = example_rows("calculator")[0]
    body = {
        **row,
        "responses_create_params": {**row["responses_create_params"], "not_a_field": 1},
        "response": {"output": []},
    }
    reply = httpx.post(f"{calc.url}/verify", json=body, timeout=60)
    assert reply.status_code == 422 and "not_a_field" in reply.json()["message"]
