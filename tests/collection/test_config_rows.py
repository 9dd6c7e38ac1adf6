"""Dataset JSONL: line-numbered errors, nothing skipped but blank lines, taskset collation (each
ID-precedence rule, each refusal) and run-level options of flat rows."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from gymlab.collection.config import load_config
from gymlab.collection.config_rows import collate_taskset, config_rows, iter_expand, read_rows
from gymlab.errors import ConfigError, DatasetError

PARAMS = {"input": [{"role": "user", "content": "What is 4 squared?"}]}


def jsonl(path: Path, rows: list, raw: str = "") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows) + raw)
    return path


def test_blank_lines_are_the_only_lines_skipped(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(
        json.dumps({"responses_create_params": PARAMS})
        + "\n\n   \n"
        + json.dumps({"responses_create_params": {"input": "hi"}, "x": 1})
        + "\n"
    )
    assert [r.get("x") for r in read_rows(path)] == [None, 1]


def test_bad_json_names_the_line(tmp_path):
    path = jsonl(tmp_path / "rows.jsonl", [{"responses_create_params": PARAMS}], raw="\n{not json\n")
    with pytest.raises(DatasetError, match=r"rows\.jsonl:3: not valid JSON") as err:
        read_rows(path)
    assert err.value.line == 3


def test_a_row_must_be_an_object(tmp_path):
    with pytest.raises(DatasetError, match=r"rows\.jsonl:1: a row is a JSON object, not list"):
        read_rows(jsonl(tmp_path / "rows.jsonl", [[1, 2]]))


def test_a_flat_row_needs_responses_create_params(tmp_path):
    with pytest.raises(DatasetError, match=r"rows\.jsonl:2: missing 'responses_create_params'.*keys present: question"):
        read_rows(jsonl(tmp_path / "rows.jsonl", [{"responses_create_params": PARAMS}, {"question": "?"}]))


def test_an_unknown_request_key_is_named_with_its_line(tmp_path):
    rows = [{"responses_create_params": PARAMS}, {"responses_create_params": {**PARAMS, "temprature": 0.2}}]
    with pytest.raises(DatasetError, match=r"rows\.jsonl:2: invalid responses_create_params: unknown key 'temprature'"):
        read_rows(jsonl(tmp_path / "rows.jsonl", rows))


def test_taskset_rows_need_not_carry_a_request(tmp_path):
    assert read_rows(jsonl(tmp_path / "rows.jsonl", [{"question": "?"}]), flat=False) == [{"question": "?"}]


# -- collation: the qualified ID ----------------------------------------------------------------


def test_task_id_comes_first():
    [row] = collate_taskset([{"task_id": "t7", "problem_id": "p", "instance_id": "i", "_ng_task_index": 3}], "ts")
    assert row["task_id"] == "ts/t7"


def test_then_problem_id():
    [row] = collate_taskset([{"problem_id": "p9", "instance_id": "i", "_ng_task_index": 3}], "ts")
    assert row["task_id"] == "ts/p9"


def test_then_instance_id():
    [row] = collate_taskset([{"instance_id": "django-1", "_ng_task_index": 3}], "ts")
    assert row["task_id"] == "ts/django-1"


def test_then_an_existing_task_index():
    [row] = collate_taskset([{"question": "?", "_ng_task_index": 3}], "ts", start=10)
    assert row["task_id"] == "ts/3"
    assert row["_ng_task_index"] == 3  # kept, outside task_input
    assert "_ng_task_index" not in row["task_input"]


def test_else_the_source_row_index_across_datasets_of_the_same_type(tmp_path):
    data = tmp_path / "data"
    jsonl(data / "a.jsonl", [{"q": "a0"}, {"q": "a1"}])
    jsonl(data / "train.jsonl", [{"q": "t0"}])
    jsonl(data / "b.jsonl", [{"q": "b0"}, {"q": "b1", "problem_id": "named"}, {"q": "b2"}])
    config = tmp_path / "config.yaml"
    config.write_text(
        textwrap.dedent("""
        environment_server_routes: {bench: env}
        env:
          environment_servers:
            single_agent_turn:
              resources_server: {type: resources_servers, name: res}
        res:
          resources_servers:
            res:
              entrypoint: app.py
              datasets:
              - {name: a, type: benchmark, taskset: bench, jsonl_fpath: data/a.jsonl}
              - {name: t, type: train, taskset: bench, jsonl_fpath: data/train.jsonl}
              - {name: b, type: benchmark, taskset: bench, jsonl_fpath: data/b.jsonl}
    """)
    )
    cfg = load_config(config)
    ids = [r["task_id"] for r in config_rows(cfg, split="benchmark")]
    assert ids == ["bench/0", "bench/1", "bench/2", "bench/named", "bench/4"]
    # Picking one dataset does not shift the positions of the others of its type.
    assert [r["task_id"] for r in config_rows(cfg, dataset="b")] == ["bench/2", "bench/named", "bench/4"]
    assert [r["task_id"] for r in config_rows(cfg, dataset="t")] == ["bench/0"]


def test_task_owned_fields_stay_flat_and_collector_fields_stay_outside():
    row = {
        "responses_create_params": PARAMS,
        "expected_answer": "16",
        "task_data": {"k": 1},
        "problem_id": "p1",
        "_ng_task_index": 5,
        "_ng_rollout_index": 2,
        "rollout_id": "r-9",
        "attempt": 1,
    }
    [out] = collate_taskset([row], "calc")
    assert out == {
        "_ng_task_index": 5,
        "_ng_rollout_index": 2,
        "rollout_id": "r-9",
        "attempt": 1,
        "task_id": "calc/p1",
        "task_input": {
            "responses_create_params": PARAMS,
            "expected_answer": "16",
            "task_data": {"k": 1},
            "problem_id": "p1",
        },
    }


def test_collation_never_changes_the_source_file(tmp_path):
    path = jsonl(tmp_path / "data" / "rows.jsonl", [{"q": "a"}, {"q": "b", "task_id": "x"}])
    before = path.read_bytes()
    rows = read_rows(path, flat=False)
    collate_taskset(rows, "ts")
    assert path.read_bytes() == before
    assert rows == [{"q": "a"}, {"q": "b", "task_id": "x"}]  # the rows read are not mutated either


# -- collation: refusals --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "option, what",
    [
        ({"responses_create_params": {"temperature": 0.1}}, "run-level responses_create_params overrides"),
        ({"num_repeats_add_seed": True}, "num_repeats_add_seed"),
    ],
)
def test_collated_rows_refuse_run_level_options_at_collection_too(option, what):
    [row] = collate_taskset([{"q": "a"}], "ts")
    with pytest.raises(ConfigError, match=f"taskset rows refuse {what}"):
        list(iter_expand([row], 2, **option))


def test_already_collated_rows_are_refused_by_collation():
    with pytest.raises(DatasetError, match="already collated .*pass such rows directly with --input"):
        collate_taskset([{"task_id": "ts/1", "task_input": {}}], "ts")


# -- flat rows at collection -----------------------------------------------------------------------


def test_repeats_run_in_aabbcc_order_keeping_existing_task_indices():
    rows = [{"responses_create_params": PARAMS, "_ng_task_index": 7}, {"responses_create_params": PARAMS}]
    jobs = list(iter_expand(rows, 2))
    assert [(j["_ng_task_index"], j["_ng_rollout_index"]) for j in jobs] == [(7, 0), (7, 1), (1, 0), (1, 1)]


def test_materialized_rows_keep_their_rollout_index():
    rows = [{"responses_create_params": PARAMS, "_ng_task_index": 0, "_ng_rollout_index": 3}]
    assert list(iter_expand(rows, 1)) == rows
    with pytest.raises(ConfigError, match="already materialized"):
        list(iter_expand(rows, 2))


def test_two_rows_with_one_task_index_are_refused():
    rows = [
        {"responses_create_params": PARAMS, "_ng_task_index": 0},
        {"responses_create_params": PARAMS, "_ng_task_index": 0},
    ]
    with pytest.raises(DatasetError, match=r"rows:2: \(task 0, repeat 0\) already comes from row 1"):
        list(iter_expand(rows, 1))


def test_flat_rows_take_run_level_overrides_and_seeds():
    jobs = list(
        iter_expand(
            [{"responses_create_params": PARAMS}],
            2,
            responses_create_params={"temperature": 0.5},
            num_repeats_add_seed=True,
        )
    )
    assert [j["responses_create_params"]["temperature"] for j in jobs] == [0.5, 0.5]
    assert [json.loads(j["responses_create_params"]["metadata"]["extra_body"]) for j in jobs] == [
        {"seed": 0},
        {"seed": 1},
    ]


def test_config_rows_give_flat_rows_their_agent_and_keep_their_own(tmp_path):
    jsonl(
        tmp_path / "rows.jsonl",
        [
            {"responses_create_params": PARAMS},
            {"responses_create_params": PARAMS, "agent_ref": {"type": "responses_api_agents", "name": "other"}},
        ],
    )
    (tmp_path / "c.yaml").write_text(
        textwrap.dedent("""
        ag:
          responses_api_agents:
            simple_agent:
              datasets: [{name: rows, type: example, jsonl_fpath: rows.jsonl}]
    """)
    )
    rows = config_rows(load_config(tmp_path / "c.yaml"))
    assert [r["agent_ref"]["name"] for r in rows] == ["ag", "other"]
    with pytest.raises(ConfigError, match="no dataset matches name 'nope'; datasets: rows \\(example\\)"):
        config_rows(load_config(tmp_path / "c.yaml"), dataset="nope")
