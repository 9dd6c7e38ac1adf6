"""An agent-embedded environment (its ``/run`` grades the episode; no resources server) runs, collects,
frames and exports like any other environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import gymlab
from gymlab.examples import environment_dir, example_rows, load_environment

REPO = Path(__file__).resolve().parents[2]
CONFIG = environment_dir("guess_number") / "configs" / "guess_number.yaml"
COLLECT_TIMEOUT_S = 180


def test_run_many_on_an_embedded_environment(lab):
    env = load_environment("guess_number")
    model = lab.serve_model(env.policy)
    agent = lab.serve_agent(env.GuessNumberAgent, model=model, name="guess_number_agent")
    runs = lab.run_many(agent, example_rows("guess_number"), repeats=2)
    assert [r.reward for r in runs] == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0]  # 99 needs more than 3 guesses
    episodes = runs.episodes
    assert list(episodes["n_steps"]) == [3, 3, 1, 1, 3, 3]
    assert list(episodes["truncated"])[-1] and list(episodes["terminated"])[0]
    assert set(runs.steps["reward"]) == {0.0, 1.0}
    # Framed like a seed/verify run: the same columns.
    calc = load_environment("calculator")
    calc_agent = lab.serve_agent(
        resources=lab.serve(calc.CalculatorServer),
        model=lab.serve_model(calc.policy, name="calc_model"),
        name="calculator_agent",
    )
    calc_episodes = lab.run_many(calc_agent, example_rows("calculator")[:1]).episodes
    own = {"secret", "max_guesses", "expected"}  # each environment's rows add their own fields
    assert [c for c in calc_episodes.columns if c not in own] == [c for c in episodes.columns if c not in own]


def test_gymlab_collect_on_an_embedded_environment(tmp_path):
    out = tmp_path / "guess.jsonl"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-m", "gymlab.cli", "collect", str(CONFIG), "-o", str(out)],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=COLLECT_TIMEOUT_S,
    )
    assert done.returncode == 0, f"gymlab collect failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    records = gymlab.load(out)
    assert sorted(r.reward for r in records) == [0.0, 1.0, 1.0]
    assert {r.agent for r in records} == {"guess_number_agent"}
    assert sorted(r.task_index for r in records) == [0, 1, 2]
    episodes = records.episodes
    assert list(episodes.sort_values("task")["reward"]) == [1.0, 1.0, 0.0]
    assert len(records.steps) == sum(len(r.steps) for r in records) > 3
    sft = gymlab.export_sft(records, tmp_path / "sft.jsonl", min_reward=1.0)
    rows = [json.loads(line) for line in sft.read_text().splitlines()]
    assert len(rows) == 2 and rows[0]["messages"][0]["role"] == "system"
    assert rows[0]["messages"][-1]["role"] == "assistant"


def test_an_embedded_episode_whose_model_fails_is_a_typed_masked_record(lab):
    env = load_environment("guess_number")
    agent = lab.serve_agent(env.GuessNumberAgent, model="http://127.0.0.1:9", name="guess_number_agent")
    (record,) = lab.run_many(agent, example_rows("guess_number")[:1])
    assert record.mask_sample and record.failure_kind == "transport_unreachable" and record.failure_stage == "agent"
