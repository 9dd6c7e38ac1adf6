"""Export: rollout rows round-trip, SFT/RL rows in the chat format, filters, line-numbered read errors."""

import json

import pytest

from gymlab import Dataset, DatasetError, export_rl, export_rollouts, export_sft, load, read_jsonl
from gymlab.export import select
from gymlab.lab.runs import Rollouts


@pytest.fixture
def calc_rollouts(lab, calculator, rows):
    env = lab.serve(calculator.CalculatorServer)
    model = lab.serve_model(calculator.policy)
    agent = lab.serve_agent("simple_agent", resources=env, model=model)
    return lab.run_many(agent, rows("calculator"), repeats=2)


@pytest.fixture
def counter_rollouts(lab, counter, rows):
    env = lab.serve(counter.CounterServer)
    model = lab.serve_model(counter.policy)
    agent = lab.serve_agent("simple_agent", resources=env, model=model)
    return lab.run_many(agent, rows("counter"))


def test_rollouts_round_trip_identical(tmp_path, counter_rollouts):
    path = export_rollouts(counter_rollouts, tmp_path / "r.jsonl")
    back = load(path)
    assert isinstance(back, Rollouts) and len(back) == len(counter_rollouts) > 1
    assert list(back) == list(counter_rollouts)
    assert back[0].steps and back[0].steps[-1].reward == counter_rollouts[0].reward
    # a second export of what was read is byte-identical
    assert export_rollouts(back, tmp_path / "r2.jsonl").read_bytes() == path.read_bytes()


def test_rollout_rows_have_nemo_gym_keys_first(tmp_path, calc_rollouts):
    path = export_rollouts(calc_rollouts, tmp_path / "r.jsonl", gymlab_fields=False)
    first = json.loads(path.read_text().splitlines()[0])
    assert list(first)[:8] == [
        "responses_create_params",
        "response",
        "reward",
        "mask_sample",
        "failure_kind",
        "failure_reason",
        "_ng_task_index",
        "_ng_rollout_index",
    ]
    assert first["agent_ref"] == {"type": "responses_api_agents", "name": "simple_agent"}  # the agent that ran it
    assert "steps" not in first and "duration_s" not in first


def test_sft_rows_are_chat_format(tmp_path, calc_rollouts):
    path = export_sft(calc_rollouts, tmp_path / "sft.jsonl")
    rows = read_jsonl(path, "sft")
    assert len(rows) == len(calc_rollouts)
    messages = rows[0]["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    call = messages[2]["tool_calls"][0]
    assert messages[2]["content"] is None
    assert call["type"] == "function" and call["function"] == {"name": "square", "arguments": '{"value": 4}'}
    assert messages[3] == {"role": "tool", "tool_call_id": call["id"], "content": '{"result":16}'}
    assert messages[4] == {"role": "assistant", "content": "The answer is 16."}
    assert rows[0]["tools"] == [
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


def test_rl_rows_carry_prompt_and_reward(tmp_path, counter_rollouts):
    rows = read_jsonl(export_rl(counter_rollouts, tmp_path / "rl.jsonl"), "rl")
    assert [r["reward"] for r in rows] == [r.reward for r in counter_rollouts]
    assert [m["role"] for m in rows[0]["prompt"]] == ["user"]
    assert rows[0]["completion"][-1]["role"] == "assistant"
    assert rows[0]["completion"][0]["tool_calls"][0]["function"]["name"] == "increment"
    assert [r["_ng_task_index"] for r in rows] == list(range(len(counter_rollouts)))


def _with_rewards(records, rewards, masked=()):
    out = []
    for i, (r, reward) in enumerate(zip(records, rewards)):
        out.append(
            r.model_copy(
                update={
                    "reward": reward,
                    "mask_sample": i in masked,
                    "failure_kind": "timeout" if i in masked else None,
                }
            )
        )
    return out


def test_filters(tmp_path, calc_rollouts):
    # tasks 0,0,1,1,2,2 ("aabbcc")
    records = _with_rewards(calc_rollouts[:6], [0.2, 0.9, 0.5, 0.4, 1.0, 0.0], masked={4})
    assert [r.reward for r in select(records, min_reward=0.5)] == [0.9, 0.5, 1.0]
    assert [r.reward for r in select(records, drop_masked=True)] == [0.2, 0.9, 0.5, 0.4, 0.0]
    assert [r.reward for r in select(records, best_of_n=1)] == [0.9, 0.5, 1.0]
    assert [r.reward for r in select(records, best_of_n=1, drop_masked=True)] == [0.9, 0.5, 0.0]
    # SFT drops masked episodes by default, and says nothing else is dropped
    assert len(read_jsonl(export_sft(records, tmp_path / "s.jsonl"), "sft")) == 5
    assert len(read_jsonl(export_sft(records, tmp_path / "s.jsonl", drop_masked=False), "sft")) == 6
    rows = read_jsonl(export_rl(records, tmp_path / "rl.jsonl", min_reward=0.5, best_of_n=1), "rl")
    assert [(r["_ng_task_index"], r["reward"]) for r in rows] == [(0, 0.9), (1, 0.5)]
    with pytest.raises(ValueError, match="best_of_n must be at least 1"):
        select(records, best_of_n=0)


def test_torn_last_line_is_reported_with_its_number(tmp_path, counter_rollouts):
    path = export_rollouts(counter_rollouts, tmp_path / "r.jsonl")
    text = path.read_text()
    path.write_text(text[: len(text) - 40])  # an interrupted write: the last record cut off
    last = len(counter_rollouts)
    with pytest.raises(DatasetError, match=rf"r\.jsonl:{last}: torn last line") as info:
        load(path)
    assert info.value.line == last


def test_invalid_lines_are_reported_with_their_numbers(tmp_path, counter_rollouts):
    lines = export_rollouts(counter_rollouts, tmp_path / "r.jsonl").read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([lines[0], "{not json", lines[2]]) + "\n")
    with pytest.raises(DatasetError, match=r"bad\.jsonl:2: not valid JSON"):
        list(load(bad))  # rollouts are validated when used
    row = json.loads(lines[1])
    del row["response"]
    bad.write_text("\n".join([lines[0], lines[1], json.dumps(row)]) + "\n")
    with pytest.raises(DatasetError, match=r"bad\.jsonl:3: not a rollout row: response: Field required"):
        read_jsonl(bad, "rollout")
    sft = tmp_path / "sft.jsonl"
    good = json.dumps({"messages": [{"role": "user", "content": "hi"}], "tools": []})
    orphan = json.dumps({"messages": [{"role": "tool", "tool_call_id": "c1", "content": "4"}]})
    sft.write_text(good + "\n" + good + "\n" + orphan + "\n")
    with pytest.raises(DatasetError, match=r"sft\.jsonl:3: .*tool_call_id 'c1'.*no earlier assistant"):
        read_jsonl(sft)


def test_dataset_from_dicts_and_frame(tmp_path, rows):
    import pandas as pd

    ds = Dataset(rows("counter"))
    path = ds.write(tmp_path / "tasks.jsonl")
    again = Dataset.load(path)
    assert again.rows == ds.rows and len(again) == len(rows("counter")) and again[0]["target"] == 3
    frame = pd.DataFrame({"question": ["What is 3 squared?", "What is 5 squared?"], "answer": [9, 25]})
    tool = rows("calculator")[0]["responses_create_params"]["tools"][0]
    built = Dataset(frame, prompt="question", system="Use the square tool.", tools=[tool], temperature=0.0)
    assert built[1]["answer"] == 25 and type(built[1]["answer"]) is int
    params = built[0]["responses_create_params"]
    assert params["input"] == [
        {"role": "system", "content": "Use the square tool."},
        {"role": "user", "content": "What is 3 squared?"},
    ]
    assert params["tools"][0]["name"] == "square" and params["temperature"] == 0.0
    assert read_jsonl(built.write(tmp_path / "built.jsonl"), "task") == built.rows


def test_dataset_refuses_bad_rows_naming_the_row():
    with pytest.raises(
        DatasetError, match=r"mine:2: not a task row: invalid responses_create_params: unknown key 'tmperature'"
    ):
        Dataset(
            [{"responses_create_params": {"input": "a"}}, {"responses_create_params": {"input": "b", "tmperature": 1}}],
            name="mine",
        )
    with pytest.raises(DatasetError, match=r"dataset:1: not a task row: missing .responses_create_params."):
        Dataset([{"question": "hi"}])
