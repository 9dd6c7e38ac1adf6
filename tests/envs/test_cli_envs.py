"""``gymlab envs`` end to end: the listing, rows written for a config, ``gymlab collect`` on them
without code beyond a policy, and the probe pass on a few datasets."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("reasoning_gym")

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 180

CONFIG = """\
chain_sum:
  resources_servers:
    reasoning_gym: {}
chain_sum_agent:
  responses_api_agents:
    simple_agent:
      resources_server: {type: resources_servers, name: chain_sum}
      model_server: {type: responses_api_models, name: policy_model}
      datasets:
      - name: chain_sum
        type: example
        jsonl_fpath: chain_sum.jsonl
policy_model:
  responses_api_models:
    policy_model:
      policy: answers.py:policy
"""

#: A policy that knows every answer of the rows file beside it (a stand-in for a model).
POLICY = """\
import json
from pathlib import Path

ROWS = [json.loads(line) for line in (Path(__file__).parent / "chain_sum.jsonl").read_text().splitlines()]
TRUTH = {row["question"]: row["answer"] for row in ROWS}


def policy(request):
    question = [i.text for i in request.input_items() if i.type == "message" and i.role == "user"][-1]
    return f"Adding up. <answer>{TRUTH[question]}</answer>"
"""


def gymlab(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gymlab.cli", *args], capture_output=True, text=True, timeout=DEADLINE_S, cwd=cwd
    )


def test_envs_lists_each_adapter():
    done = gymlab("envs", "--json")
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert info["reasoning_gym"]["installed"] and "chain_sum" in info["reasoning_gym"]["names"]
    assert info["reasoning_gym"]["count"] >= 100
    assert "TicTacToe-v0" in info["textarena"]["names"] and "TicTacToe-v0-raw" not in info["textarena"]["names"]
    assert {"FrozenLake-v1", "Taxi-v4"} <= set(info["gymnasium"]["names"])
    for adapter in ("openenv", "verifiers"):  # extras that cannot sit beside the mcp one: listed either way
        assert info[adapter]["installed"] or f"pip install 'gymlab[{adapter}]'" in info[adapter]["error"]
    assert not info["verifiers"]["installed"] or "nemo_gym" in info["verifiers"]["names"]
    games = gymlab("envs", "textarena").stdout.splitlines()
    assert "TicTacToe-v0" in games
    assert any(g.startswith("Hangman-v0  (") or g == "Hangman-v0" for g in games)  # with what it needs, if missing


def test_rows_then_collect_from_a_config(tmp_path):
    done = gymlab("envs", "reasoning_gym", "chain_sum", "--rows", str(tmp_path / "chain_sum.jsonl"), "--size", "6",
                  "--seed", "2", "--set", "max_terms=3")  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "wrote 6 rows of chain_sum" in done.stdout
    rows = [json.loads(line) for line in (tmp_path / "chain_sum.jsonl").read_text().splitlines()]
    assert [r["reasoning_gym"]["config"] for r in rows] == [{"size": 6, "seed": 2, "max_terms": 3}] * 6
    (tmp_path / "config.yaml").write_text(CONFIG)
    (tmp_path / "answers.py").write_text(POLICY)
    out = tmp_path / "run.jsonl"
    done = gymlab("collect", str(tmp_path / "config.yaml"), "-o", str(out), "--no-progress", "--repeats", "2")
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 12 and all(r["reward"] == 1.0 and not r["mask_sample"] for r in records)
    assert {r["reasoning_gym"]["index"] for r in records} == set(range(6))


def test_cli_mistakes_are_one_line_and_exit_2(tmp_path):
    cases = [
        (("envs", "reasoning_gym", "chain_summ", "--rows", str(tmp_path / "x.jsonl")), "no reasoning-gym dataset"),
        (("envs", "reasoning_gym", "chain_sum", "--rows", str(tmp_path / "x.jsonl"), "--set", "oops"), "KEY=VALUE"),
        (("envs", "reasoning_gym", "chain_sum", "--rows", str(tmp_path / "x.jsonl"), "--set", "colour=1"), "fields"),
        (("envs", "--rows", str(tmp_path / "x.jsonl")), "needs an adapter and a name"),
        (("envs", "textarena", "--probe"), "--probe runs over reasoning_gym"),
        (("envs", "reasoning_gym", "chain_sum", "--probe", "--threshold", "high"), "invalid float value"),
    ]
    for args, cause in cases:
        done = gymlab(*args)
        assert done.returncode == 2, (args, done.stderr)
        assert cause in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert not (tmp_path / "x.jsonl").exists()


def test_the_probe_pass_on_a_few_datasets():
    done = gymlab("envs", "reasoning_gym", "chain_sum,spell_backward,graph_color,composite", "--probe", "--size", "3",
                  "--json")  # fmt: skip
    assert done.returncode == 0, done.stderr
    table = json.loads(done.stdout)
    assert set(table["datasets"]) == {"chain_sum", "spell_backward", "graph_color"}
    assert "composite" in table["skipped"]  # it needs its datasets named
    chain = table["datasets"]["chain_sum"]
    assert chain["oracle"] == 1.0 and chain["masked"] == 0 and not chain["constant"]
    # reasoning-gym's default score_answer pays len(answer)/len(text) when the answer is inside the text
    assert 0 < chain["paid"]["tagged_spray"] < 0.01
    assert table["datasets"]["graph_color"]["oracle"] is None  # no single answer to give
    assert chain["flagged"] == []  # below the pass's threshold, 0.05: partial credit, no shortcut
    # 5 probes, 19 short constants, 6 numbers of the prompt, the most common answer, 3 in tags, the oracle
    assert table["episodes"] == 3 * 3 * 35 and table["seconds"] < 120
    text = gymlab("envs", "reasoning_gym", "chain_sum", "--probe", "--size", "2").stdout
    assert (
        text.startswith("| dataset | oracle | flagged by") and "0 with a finding above, 1 paying a non-answer" in text
    )


GAME_CONFIG = """\
hanoi:
  resources_servers:
    textarena:
      env_id: TowerOfHanoi-v0
hanoi_agent:
  responses_api_agents:
    gymnasium_agent:
      max_steps: 12
      resources_server: {type: resources_servers, name: hanoi}
      model_server: {type: responses_api_models, name: policy_model}
      datasets:
      - name: hanoi
        type: example
        jsonl_fpath: hanoi.jsonl
policy_model:
  responses_api_models:
    policy_model:
      policy: solver.py:policy
"""

SOLVER = """\
MOVES = ["[A C]", "[A B]", "[C B]", "[A C]", "[B A]", "[B C]", "[A C]"]


def policy(request):
    return MOVES[sum(1 for i in request.input_items() if getattr(i, "role", None) == "assistant")]
"""


def test_a_textarena_game_collected_from_a_config(tmp_path):
    done = gymlab("envs", "textarena", "TowerOfHanoi-v0", "--rows", str(tmp_path / "hanoi.jsonl"), "--seeds", "3")
    assert done.returncode == 0, done.stderr
    (tmp_path / "config.yaml").write_text(GAME_CONFIG)
    (tmp_path / "solver.py").write_text(SOLVER)
    out = tmp_path / "run.jsonl"
    done = gymlab("collect", str(tmp_path / "config.yaml"), "-o", str(out), "--no-progress")
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["seed"] for r in records) == [0, 1, 2]
    assert all(r["reward"] == 1.0 and r["terminated"] and len(r["steps"]) == 7 for r in records)
