"""Each trainer format over collected example rollouts: the consuming library reads the file, the
columns and types are the documented ones, pairs prefer the higher reward, counts and rewards survive."""

from __future__ import annotations

import json

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from gymlab import export_dataset, export_rollouts, read_dataset
from gymlab.errors import ExportError
from gymlab.examples import example_rows
from gymlab.export import FORMATS, by_task, select

MESSAGE = pa.struct(
    [
        ("role", pa.string()),
        ("content", pa.string()),
        ("reasoning_content", pa.string()),
        (
            "tool_calls",
            pa.list_(
                pa.struct(
                    [
                        ("id", pa.string()),
                        ("type", pa.string()),
                        ("function", pa.struct([("name", pa.string()), ("arguments", pa.string())])),
                    ]
                )
            ),
        ),
        ("tool_call_id", pa.string()),
    ]
)
MESSAGES = pa.list_(MESSAGE)


def load(path, tmp_path):
    """The file as ``datasets.load_dataset`` gives it (the library TRL and verl read with)."""
    builder = "parquet" if path.suffix == ".parquet" else "json"
    return datasets.load_dataset(builder, data_files=str(path), split="train", cache_dir=str(tmp_path / "hf-cache"))


def without_nulls(messages):
    return [{k: v for k, v in m.items() if v is not None or k == "content"} for m in messages]


@pytest.fixture(scope="module")
def records(collected):
    calc, count = collected
    return calc + count


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_trl_sft_conversations_keep_tool_calls_reasoning_and_tools(tmp_path, collected, suffix):
    calc, _ = collected
    result = export_dataset(calc, tmp_path / f"sft{suffix}", "trl-sft", min_reward=1.0)
    kept = [r for r in calc if r.reward >= 1.0 and not r.mask_sample]
    ds = load(result.path, tmp_path)
    assert ds.column_names == ["messages", "tools"] and len(ds) == result.rows == len(kept) > 0
    if suffix == ".parquet":
        assert pq.read_schema(result.path) == pa.schema([("messages", MESSAGES), ("tools", pa.string())])
    messages = without_nulls(ds[0]["messages"])
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert messages[0]["content"] == "You are a calculator. Use the square tool."  # the prompt is included
    call = messages[2]["tool_calls"][0]
    assert messages[2]["reasoning_content"] == "I should square 4 with the tool."
    assert call["type"] == "function" and call["function"] == {"name": "square", "arguments": '{"value": 4}'}
    assert messages[3] == {"role": "tool", "tool_call_id": call["id"], "content": '{"result":16}'}
    tools = json.loads(ds[0]["tools"])
    assert tools[0]["type"] == "function" and tools[0]["function"]["name"] == "square"
    assert tools[0]["function"]["parameters"]["required"] == ["value"]
    assert result.rewards["count"] == len(kept) and result.rewards["mean"] == 1.0


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_trl_dpo_pairs_best_against_worst_of_each_task(tmp_path, records, suffix):
    result = export_dataset(records, tmp_path / f"dpo{suffix}", "trl-dpo")
    ds = load(result.path, tmp_path)
    assert ds.column_names == ["prompt", "chosen", "rejected", "tools", "score_chosen", "score_rejected"]
    if suffix == ".parquet":
        schema = pq.read_schema(result.path)
        assert [schema.field(c).type for c in ("prompt", "chosen", "rejected")] == [MESSAGES] * 3
        assert schema.field("score_chosen").type == pa.float64() == schema.field("score_rejected").type
    # expected from the records: one pair per task whose unmasked rewards differ
    groups = by_task(r for r in records if not r.mask_sample)
    mixed = [g for g in groups.values() if len({r.reward for r in g}) > 1]
    assert len(ds) == result.rows == len(mixed) > 0
    assert result.counts["ties_dropped"] == len(groups) - len(mixed) > 0  # every counter task: all 1.0
    assert all(row["score_chosen"] > row["score_rejected"] for row in ds)
    assert [(row["score_chosen"], row["score_rejected"]) for row in ds] == [
        (max(r.reward for r in g), min(r.reward for r in g)) for g in mixed
    ]
    first = ds[0]
    assert [m["role"] for m in first["prompt"]] == ["system", "user"]
    assert without_nulls(first["chosen"])[0]["tool_calls"][0]["function"]["name"] == "square"
    assert [m["role"] for m in first["rejected"]] == ["assistant"]  # answered from memory
    # a margin the pairs cannot reach drops them all, counted
    none = export_dataset(records, tmp_path / f"none{suffix}", "trl-dpo", min_margin=1.5)
    assert none.rows == 0 and none.counts["below_margin_dropped"] == len(mixed)


def test_masked_episodes_never_enter_a_pair(tmp_path, collected):
    calc, _ = collected
    masked = [r for r in calc if r.mask_sample]
    assert masked and masked[0].failure_kind == "provider_unavailable"
    task = masked[0].task_index
    group = [r for r in calc if r.task_index == task]
    # only the masked episode and the worst: no pair is left for that task
    only = [r for r in group if r.mask_sample or r.reward == 0.0][:2]
    result = export_dataset(only, tmp_path / "dpo.jsonl", "trl-dpo")
    assert result.rows == 0 and result.counts["tasks_with_one_episode"] == 1


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_trl_kto_labels_each_episode(tmp_path, collected, suffix):
    calc, _ = collected
    result = export_dataset(calc, tmp_path / f"kto{suffix}", "trl-kto")
    ds = load(result.path, tmp_path)
    assert ds.column_names == ["prompt", "completion", "label", "tools", "reward"]
    assert ds.features["label"] == datasets.Value("bool")
    unmasked = [r for r in calc if not r.mask_sample]
    assert ds["label"] == [r.reward >= 1.0 for r in unmasked] and ds["reward"] == [r.reward for r in unmasked]
    assert result.counts["desirable"] == sum(ds["label"]) > 0 and result.counts["undesirable"] > 0
    strict = export_dataset(calc, tmp_path / f"k2{suffix}", "trl-kto", label_threshold=2.0)
    assert strict.counts["desirable"] == 0


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_trl_grpo_has_one_prompt_per_task_with_its_ground_truth(tmp_path, collected, suffix):
    _, count = collected
    result = export_dataset(count, tmp_path / f"grpo{suffix}", "trl-grpo", ground_truth="target")
    ds = load(result.path, tmp_path)
    assert ds.column_names == ["prompt", "ground_truth", "tools", "reward_mean", "episodes"]
    tasks = by_task(count)
    assert len(ds) == len(tasks) and ds["episodes"] == [len(g) for g in tasks.values()]
    assert ds["ground_truth"] == [str(g[0].target) for g in tasks.values()]
    assert ds["reward_mean"] == [sum(r.reward for r in g) / len(g) for g in tasks.values()]
    assert [m["role"] for m in ds[0]["prompt"]] == ["user"]
    # default: the task row's own input fields (never the verifier's echo, final_count), named in the card
    whole = export_dataset(count, tmp_path / f"all{suffix}", "trl-grpo", rows=example_rows("counter"))
    assert json.loads(read_dataset(whole.path)[0]["ground_truth"]) == {"initial_count": 0, "target": 3}
    card = whole.card.read_text()
    assert "the task row's own input fields (initial_count, target)" in card and "the rows given" in card


def test_default_ground_truth_reads_the_materialized_inputs_beside_a_collection(tmp_path, collected):
    """A rollouts file with its ``NAME_materialized_inputs.jsonl`` (as gymlab collect and NeMo Gym write
    them) needs no option; rows without fields of their own give null, never "{}"."""
    calc, count = collected
    path = export_rollouts(count, tmp_path / "count.jsonl")
    inputs = [{**row, "_ng_task_index": i, "_ng_rollout_index": 0} for i, row in enumerate(example_rows("counter"))]
    (tmp_path / "count_materialized_inputs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in inputs))
    result = export_dataset(path, tmp_path / "out" / "verl.jsonl", "verl")
    truths = [json.loads(r["reward_model"]["ground_truth"]) for r in read_dataset(result.path)]
    assert truths == [{"initial_count": r["initial_count"], "target": r["target"]} for r in example_rows("counter")]
    assert "count_materialized_inputs.jsonl" in result.card.read_text()
    bare = export_dataset(calc, tmp_path / "calc" / "grpo.parquet", "trl-grpo", rows=example_rows("calculator"))
    assert {r["ground_truth"] for r in read_dataset(bare.path)} == {None}  # the calculator's rows have no fields


def test_default_ground_truth_without_rows_is_refused_naming_both_ways_out(tmp_path, collected):
    _, count = collected
    with pytest.raises(
        ExportError, match=r"the default ground truth is the task row's own input fields.*rows=.*ground_truth="
    ):
        export_dataset(count, tmp_path / "grpo.jsonl", "trl-grpo")
    with pytest.raises(ExportError, match=r"episode task 2 repeat 0: no dataset row for task 2 among the 2 rows given"):
        export_dataset(count, tmp_path / "grpo.jsonl", "trl-grpo", rows=example_rows("counter")[:2])
    clash = [{"_ng_task_index": 0, "target": 1}, {"_ng_task_index": 0, "target": 2}]
    with pytest.raises(ExportError, match=r"task 0 has different input rows"):
        export_dataset(count, tmp_path / "grpo.jsonl", "trl-grpo", rows=clash)
    assert not (tmp_path / "grpo.jsonl").exists()


def test_verl_writes_the_tool_config_its_multi_turn_rollout_reads(tmp_path, collected):
    calc, count = collected
    result = export_dataset(count, tmp_path / "verl.parquet", "verl", ground_truth="target", tool_class="my.tools.Gym")
    assert result.tool_config == tmp_path / "verl_tool_config.yaml"
    config = yaml.safe_load(result.tool_config.read_text())
    (tool,) = config["tools"]
    assert tool["class_name"] == "my.tools.Gym" and tool["config"] == {"type": "native"}
    declared = example_rows("counter")[0]["responses_create_params"]["tools"][0]
    assert tool["tool_schema"]["type"] == "function"
    assert {k: tool["tool_schema"]["function"][k] for k in ("name", "description", "parameters")} == {
        k: declared[k] for k in ("name", "description", "parameters")
    }
    assert "verl_tool_config.yaml: verl's multi_turn tool_config_path" in result.card.read_text()
    # rows that declare no tools get none
    plain = [
        r.model_copy(update={"responses_create_params": r.responses_create_params.model_copy(update={"tools": []})})
        for r in count
    ]
    assert export_dataset(plain, tmp_path / "p" / "v.parquet", "verl", ground_truth="target").tool_config is None
    assert not (tmp_path / "p" / "v_tool_config.yaml").exists()


def test_verl_rows_have_the_documented_columns_and_types(tmp_path, collected):
    _, count = collected
    result = export_dataset(count, tmp_path / "verl.parquet", "verl", ground_truth="target", data_source="counter")
    schema = pq.read_schema(result.path)
    assert schema.names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    assert schema.field("data_source").type == pa.string() == schema.field("ability").type
    assert schema.field("prompt").type == MESSAGES
    assert schema.field("reward_model").type == pa.struct([("style", pa.string()), ("ground_truth", pa.string())])
    extra = schema.field("extra_info").type
    assert extra.field("index").type == pa.int64() and extra.field("split").type == pa.string()
    ds = load(result.path, tmp_path)
    assert len(ds) == len(by_task(count))
    row = ds[0]
    assert row["data_source"] == "counter" and row["ability"] == "tool_use"
    assert row["reward_model"] == {"style": "rule", "ground_truth": "3"}
    assert row["extra_info"]["index"] == 0 and row["extra_info"]["split"] == "train"
    assert json.loads(row["extra_info"]["tools"])[0]["function"]["name"] == "increment"


@pytest.mark.parametrize("format", list(FORMATS))
@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_round_trip_counts_and_rewards_equal(tmp_path, records, format, suffix):
    options = {"ground_truth": lambda r: r.task_index} if format in ("trl-grpo", "verl") else {}
    result = export_dataset(records, tmp_path / f"out{suffix}", format, **options)
    rows = read_dataset(result.path)  # every row checked
    assert len(rows) == result.rows == len(load(result.path, tmp_path)) > 0
    card = (tmp_path / "README.md").read_text()
    assert f"| rows written | {result.rows} |" in card and f"| episodes read | {len(records)} |" in card
    assert f"path: out{suffix}" in card  # the YAML config names the data file
    unmasked = select(records, drop_masked=True)
    if format == "trl-sft":
        assert result.rewards["count"] == len(unmasked)
    elif format == "trl-kto":
        assert [r["reward"] for r in rows] == [r.reward for r in unmasked]
    elif format == "trl-dpo":
        assert result.rewards["count"] == 2 * len(rows)  # both episodes of every pair
        assert result.rewards["mean_chosen"] == sum(r["score_chosen"] for r in rows) / len(rows)
    else:
        means = [r["reward_mean"] if format == "trl-grpo" else r["extra_info"]["reward_mean"] for r in rows]
        assert means == [sum(x.reward for x in g) / len(g) for g in by_task(unmasked).values()]


def test_to_hf_matches_the_parquet_file_and_the_card_loads_the_folder(tmp_path, collected):
    calc, _ = collected
    in_memory = calc.to_hf("trl-dpo")
    result = export_dataset(calc, tmp_path / "dpo" / "train.parquet", "trl-dpo")
    from_file = load(result.path, tmp_path)
    assert in_memory.features == from_file.features and in_memory.to_list() == from_file.to_list()
    folder = datasets.load_dataset(str(tmp_path / "dpo"), split="train", cache_dir=str(tmp_path / "hf-cache"))
    assert folder.to_list() == from_file.to_list()
    sft = calc.to_hf(min_reward=1.0)
    assert sft.column_names == ["messages", "tools"] and len(sft) == sum(r.reward >= 1.0 for r in calc)
