"""Dataset metrics count custom rows; response figures come only from rows whose params validate."""

import json
import subprocess
import sys
import textwrap

from gymlab.collection.readers import dataset_metrics


def test_custom_rows_are_counted_and_response_figures_need_valid_params():
    rows = [
        {"question": "2+2?", "answer": 4},  # a taskset's custom row: no Responses fields at all
        {"question": "3+3?", "answer": 6},
        {
            "responses_create_params": {
                "input": [{"role": "user", "content": "hi"}],
                "temperature": 0.5,
                "tools": [{"type": "function", "name": "square", "parameters": {}}],
            },
            "answer": 1,
        },
        {"responses_create_params": {"input": "x", "temprature": 1}},  # invalid: a typo'd key
    ]
    m = dataset_metrics(rows)
    assert m["num_rows"] == 4
    assert m["fields"] == {"answer": 3, "question": 2}
    assert (
        m["num_rows_with_responses_create_params"],
        m["num_rows_without_responses_create_params"],
        m["num_rows_with_invalid_responses_create_params"],
    ) == (1, 2, 1)
    assert m["responses"]["tools"] == {"square": 1} and m["responses"]["sampling_settings"] == {"temperature": 1}
    assert m["responses"]["input_items"] == {"min": 1, "mean": 1.0, "max": 1}
    assert "responses" not in dataset_metrics(rows[:2])


def test_gymlab_list_metrics_reads_a_taskset_of_custom_rows(tmp_path):
    (tmp_path / "rows.jsonl").write_text(
        "".join(json.dumps({"question": f"q{i}", "answer": i}) + "\n" for i in range(3))
    )
    (tmp_path / "config.yaml").write_text(
        textwrap.dedent("""
        qa:
          resources_servers:
            qa:
              entrypoint: app.py
              datasets:
              - {name: questions, type: example, jsonl_fpath: rows.jsonl}
    """)
    )
    (tmp_path / "app.py").write_text("")
    out = subprocess.run(
        [sys.executable, "-m", "gymlab.cli", "list", str(tmp_path / "config.yaml"), "--metrics", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    (dataset,) = json.loads(out.stdout)["datasets"]
    assert dataset["metrics"]["num_rows"] == 3 and dataset["metrics"]["fields"] == {"answer": 3, "question": 3}
