"""``gymlab probe CONFIG``: the verdict printed, exit 1 when a probe is flagged, rollouts saved per probe."""

from __future__ import annotations

import json
import re
import textwrap
from pathlib import Path

import pytest

from gymlab.cli import main

ROOT = Path(__file__).resolve().parents[2]
CALCULATOR_YAML = ROOT / "environments" / "calculator" / "configs" / "calculator.yaml"

HACKABLE_APP = """
from gymlab import BaseVerifyRequest, BaseVerifyResponse, SimpleResourcesServer


class AnswerServer(SimpleResourcesServer):
    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=float("42" in body.response.output_text))


def policy(request):
    return "42"
"""

HACKABLE_YAML = """
answers:
  resources_servers:
    answers:
      entrypoint: app.py
answers_agent:
  responses_api_agents:
    simple_agent:
      resources_server: {type: resources_servers, name: answers}
      model_server: {type: responses_api_models, name: policy_model}
      datasets:
      - {name: example, type: example, jsonl_fpath: rows.jsonl}
policy_model:
  responses_api_models:
    policy_model:
      policy: app.py:policy
"""


def test_probe_the_shipped_calculator_config(capsys):
    assert main(["probe", str(CALCULATOR_YAML)]) == 0
    out = capsys.readouterr().out
    assert "gymlab probe: calculator_simple_agent, 5 rows x 1" in out
    assert re.search(r"real policy +1\.00 +1\.00 +1\.00 +1\.00 +1\.00 +1\.00 +0% *\n", out)
    assert "No probe earned a mean reward above 0 over every task" in out


def test_a_hackable_config_exits_1_and_saves_each_probes_rollouts(tmp_path, capsys):
    (tmp_path / "app.py").write_text(textwrap.dedent(HACKABLE_APP))
    (tmp_path / "config.yaml").write_text(HACKABLE_YAML)
    rows = [{"responses_create_params": {"input": f"What is {a} + {b}?"}} for a, b in ((40, 2), (6, 36))]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    args = ["probe", str(tmp_path / "config.yaml"), "--probes", "answer_spray,refusal", "-n", "2"]
    assert main([*args, "-o", str(tmp_path / "out")]) == 1
    out = capsys.readouterr().out
    assert "answers_agent, 2 rows x 2" in out and "answer_spray: it earned a mean reward of 1.00 (above 0)." in out
    spray = [json.loads(line) for line in (tmp_path / "out" / "answers_agent" / "answer_spray.jsonl").open()]
    assert len(spray) == 4 and {r["reward"] for r in spray} == {1.0}
    refusal = [json.loads(line) for line in (tmp_path / "out" / "answers_agent" / "refusal.jsonl").open()]
    assert {r["reward"] for r in refusal} == {0.0}


@pytest.mark.parametrize("flags", [[], ["--gymnasium"]], ids=["seed-verify", "gymnasium"])
def test_a_new_environment_from_gymlab_init_is_not_flagged(tmp_path, capsys, flags):
    """The template's verify once paid any answer holding the count: calling the tool, then the spray;
    and two of its four rows counted 6 words, so the answer "6" alone paid half of them."""
    assert main(["init", str(tmp_path / "myenv"), *flags]) == 0
    assert main(["probe", str(tmp_path / "myenv" / "configs" / "myenv.yaml")]) == 0
    out = capsys.readouterr().out
    assert re.search(r"call_every_tool_then_spray +0\.00", out) and "No probe earned a mean reward above 0" in out


def test_unknown_agent_is_a_one_line_error(capsys):
    assert main(["probe", str(CALCULATOR_YAML), "--agent", "nope"]) == 2
    err = capsys.readouterr().err
    assert "gymlab probe: error: --agent 'nope': no such agent in the config; agents: calculator_simple_agent" in err


def test_unknown_probe_is_a_one_line_error(capsys):
    assert main(["probe", str(CALCULATOR_YAML), "--probes", "refusal,nope"]) == 2
    assert (
        "gymlab probe: error: --probes: unknown probe 'nope'; built-in probes: empty_answer" in capsys.readouterr().err
    )
