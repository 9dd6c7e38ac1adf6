"""NeMo Gym 0.7.0's own rollout files load as records, frames and exports like a gymlab run.

``tests/data/nemo_gym/example_rollouts/`` holds every ``example_rollouts.jsonl`` its wheel ships (one
per server name; large ones trimmed, see ``copy_examples.py``).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
import pytest

import gymlab
from gymlab.errors import DatasetError
from gymlab.examples import example_rows, load_environment
from gymlab.lab.runs import Rollouts
from gymlab.lab.viewer import episode_steps
from gymlab.protocol import ResponseCreateParams
from gymlab.protocol.record import Rollout
from tests.wire.nemo_shapes import INPUTS, INTEROP, ROLLOUTS, fixture_rows

EXAMPLES = sorted((INTEROP / "example_rollouts").glob("*.jsonl"))
#: Shipped files that hold no rollout records: task rows (no response yet), and what they are instead.
TASK_ROWS = {"genrm_compare", "multichallenge"}
NOT_RECORDS = {
    # five lines of ``<PLACEHOLDER ROW>``: not JSON
    "browsecomp_advanced_harness": "not valid JSON",
    "jailbreak_detection": "not valid JSON",
    "over_refusal_detection": "not valid JSON",
    "tavily_search": "not valid JSON",
    # a judge's own report rows (policy_response, answer_judgment), no request or response
    "bbq": "missing 'responses_create_params'",
    # an environment server's result (``_ng_result_type``): a conversation's invocations, no response
    "nemo_user_sim": "missing 'responses_create_params'",
}
TOOL_CALLS = {"function_call", "mcp_call", "custom_tool_call", "computer_call"}


def test_every_shipped_example_file_is_here():
    assert len(EXAMPLES) == 174, "copy_examples.py copies one file per server name of nemo-gym 0.7.0"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_shipped_example_rollouts_load_with_steps(path: Path):
    if path.stem in NOT_RECORDS:
        with pytest.raises(DatasetError, match=NOT_RECORDS[path.stem]) as caught:
            gymlab.load(path)
        assert caught.value.line == 1 and path.name in str(caught.value)
        return
    loaded = gymlab.load(path)
    if path.stem in TASK_ROWS:
        assert loaded and all("responses_create_params" in row for row in loaded)
        return
    assert isinstance(loaded, Rollouts) and len(loaded) == len(fixture_rows(path))
    records = [loaded.store.record(i) for i in range(len(loaded))]  # every record validates
    rows = fixture_rows(path)
    called = sum(getattr(i, "type", "") in TOOL_CALLS for r in records for i in r.response.output)
    steps = loaded.steps_frame()
    assert len(steps) == sum(len(r.steps) for r in records)
    if called:
        assert len(steps) > 0
    for record, row in zip(records, rows):
        assert "steps" not in row  # NeMo's files carry none: these are derived from the output
        assert record.steps == Rollout.model_validate(row).steps  # the store and validation derive alike
        if record.steps:
            assert record.steps[-1].reward == record.reward
        assert episode_steps(record) == record.steps  # the viewer shows the same steps
        items = [i for s in record.steps for i in (*s.action, *s.tool_outputs)]
        outputs = [i for i in record.response.output if not (i.type == "message" and i.role == "user")]
        assert len(items) == len(outputs)  # every item but a user message lands in one step


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
    steps = records.steps  # derived from the output: the call and its output, then the final message
    assert list(steps["episode"]) == [0, 0, 1, 1] and list(steps["step"]) == [0, 1, 0, 1]
    assert list(steps["reward"]) == [0.0, 1.0, 0.0, 1.0]
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


def _nemo_record(output, **fields):
    return {"responses_create_params": {"input": "q"}, "response": {"output": output}, "reward": 0.5, **fields}


CALL = {"type": "function_call", "name": "f", "arguments": "{}", "call_id": "c1"}
OUT = {"type": "function_call_output", "call_id": "c1", "output": "1"}
FINAL = {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "done"}]}


def test_derived_steps_pair_calls_with_outputs_and_end_on_the_final_message():
    record = Rollout.model_validate(_nemo_record([CALL, OUT, CALL, OUT, FINAL]))
    assert [len(s.action) for s in record.steps] == [1, 1, 1]
    assert [len(s.tool_outputs) for s in record.steps] == [1, 1, 0]
    assert [s.reward for s in record.steps] == [0.0, 0.0, 0.5]
    assert record.steps[-1].terminated and not record.steps[-1].truncated


def test_derived_steps_of_a_gymnasium_agent_take_user_messages_as_observations():
    user = {"type": "message", "role": "user", "content": "you see a door"}
    record = Rollout.model_validate(_nemo_record([user, FINAL, user, FINAL], terminated=False, truncated=True))
    assert [s.observation for s in record.steps] == ["you see a door", None]  # the first is the prompt's
    assert record.steps[-1].truncated and not record.steps[-1].terminated


def test_derived_steps_refuse_nothing_and_invent_nothing(tmp_path):
    """Hostile output: an output before any call, a call never answered, a nested ``steps`` key in a
    row field, items that are not objects, a record that has its own steps (kept as they are)."""
    orphan = {"type": "function_call_output", "call_id": "x", "output": "?"}
    cases = [
        _nemo_record([orphan, CALL]),
        _nemo_record([CALL], meta={"steps": "4"}),
        _nemo_record([CALL, OUT], steps=[]),
        _nemo_record([]),
    ]
    path = tmp_path / "hostile.jsonl"
    spaced = json.dumps(_nemo_record([CALL, OUT])).replace('"response"', '"steps"  :  [], "response"', 1)
    path.write_text("".join(json.dumps(c) + "\n" for c in cases) + spaced + "\n")
    loaded = gymlab.load(path)
    records = [loaded.store.record(i) for i in range(len(loaded))]
    assert [len(r.steps) for r in records] == [1, 1, 0, 0, 0]  # own steps kept, however spaced
    assert not records[0].steps[0].terminated  # an unanswered call is not a final message
    assert list(loaded.steps_frame()["episode"]) == [0, 1]
    with pytest.raises(DatasetError, match=r"hostile.jsonl:1: not a rollout record: response.output.0"):
        path.write_text(json.dumps(_nemo_record([7])) + "\n")
        gymlab.load(path).store.record(0)


def test_null_token_counts_stay_unknown_when_summed():
    from gymlab.protocol.responses import Usage

    known = Usage.model_validate({"input_tokens": 2, "input_tokens_details": {"cached_tokens": 1}})
    unknown = Usage.model_validate({"input_tokens": 3, "input_tokens_details": {"cached_tokens": None}})
    assert (known + known).input_tokens_details.cached_tokens == 2
    assert (known + unknown).input_tokens_details.cached_tokens is None  # never a measured 0
    assert (known + unknown).input_tokens == 5


def test_verify_answers_write_reserved_keys_null_and_gymlab_options_only_when_set(lab):
    """The reference's ``failure_kind``/``failure_reason`` are always in a verify answer (null when
    unset); gymlab's ``reward_components``/``judgements`` only when set, so NeMo's agents, which write
    the answer as the rollout, never put ``null`` for them into a file."""
    calc = lab.serve(load_environment("calculator").CalculatorServer)
    row = example_rows("calculator")[0]
    client = httpx.Client(base_url=calc.url, timeout=60)
    assert client.post("/seed_session", json=row).status_code == 200
    answer = client.post("/verify", json={**row, "response": {"output": []}}).json()
    assert answer["failure_kind"] is None and answer["failure_reason"] is None and answer["mask_sample"] is False
    assert "reward_components" not in answer and "judgements" not in answer
    from gymlab.protocol import BaseVerifyResponse

    set_ = BaseVerifyResponse(**{**row, "response": {"output": []}}, reward=1.0, reward_components={"a": None})
    assert set_.model_dump()["reward_components"] == {"a": None}  # a failed judge's None inside stays
    schema = BaseVerifyResponse.model_json_schema(mode="serialization")
    assert {"reward_components", "judgements"} <= set(schema["properties"]) - set(schema["required"])
