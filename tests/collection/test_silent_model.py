"""Nothing waits forever: a model that never answers, or answers something that is not a response.

Every failure is a masked record or a failures-file row with a registered kind, in bounded time, and
the seeded session is released on the resources server.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
import time

import pytest
from fastapi import FastAPI

from gymlab import BaseServer, ServerError, collect
from gymlab.examples import example_rows, load_environment

counter = load_environment("counter")


async def silent(request):
    """A model that accepts the request and never answers."""
    await asyncio.Event().wait()


def test_collect_with_default_options_on_a_silent_model_ends_with_every_row_failed(lab, tmp_path):
    env = lab.serve(counter.CounterServer)
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(silent), timeouts={"model": 0.5})
    rows = example_rows("counter")
    t0 = time.monotonic()
    result = collect(rows, tmp_path / "run.jsonl", agent_url=agent.url, progress=False)  # default options
    assert time.monotonic() - t0 < 60
    assert result.rollouts == [] and len(result.failures) == len(rows)
    failures = [json.loads(line) for line in (tmp_path / "run_failures.jsonl").read_text().splitlines()]
    assert [f["_ng_task_index"] for f in failures] == list(range(len(rows)))
    assert {(f["failure_kind"], f["failure_stage"]) for f in failures} == {("transport_timeout", "agent")}
    assert all("within 0.5 s" in f["failure_reason"] and f["attempts"] == 3 for f in failures)
    assert env.server.session_state == {}  # every seeded counter was released


def test_an_episode_past_its_whole_budget_is_an_agent_timeout_and_released(lab, tmp_path):
    env = lab.serve(counter.CounterServer)
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(silent), timeouts={"episode": 0.5})
    rollouts = lab.run_many(agent, example_rows("counter")[:2])
    assert [(r.mask_sample, r.failure_kind, r.failure_stage) for r in rollouts] == [
        (True, "agent_timeout", "agent")
    ] * 2
    assert rollouts.episodes["failure_kind"].tolist() == ["agent_timeout"] * 2
    assert env.server.session_state == {}


SILENT_APP = """
import asyncio

async def policy(request):
    await asyncio.Event().wait()
"""

SILENT_CONFIG = """
counter:
  resources_servers:
    counter:
      entrypoint: {counter}
agent:
  responses_api_agents:
    simple_agent:
      resources_server: {{type: resources_servers, name: counter}}
      model_server: {{type: responses_api_models, name: silent}}
      timeouts: {{model: 0.5}}
      datasets:
      - {{name: rows, type: example, jsonl_fpath: {rows}}}
silent:
  responses_api_models:
    policy_model:
      policy: app.py:policy
"""


def test_the_collect_command_on_a_silent_model_finishes_with_every_row_in_the_failures_file(tmp_path):
    from gymlab.examples import environment_dir

    (tmp_path / "app.py").write_text(textwrap.dedent(SILENT_APP))
    (tmp_path / "config.yaml").write_text(
        textwrap.dedent(SILENT_CONFIG).format(
            counter=environment_dir("counter") / "app.py", rows=environment_dir("counter") / "data" / "example.jsonl"
        )
    )
    out = tmp_path / "run.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "gymlab.cli", "collect", str(tmp_path / "config.yaml"), "-o", str(out), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr  # some rollouts failed: they are in the failures file
    failures = [json.loads(line) for line in (tmp_path / "run_failures.jsonl").read_text().splitlines()]
    assert len(failures) == len(example_rows("counter"))
    assert {f["failure_kind"] for f in failures} == {"transport_timeout"}
    assert out.read_text() == ""


class HelloModel(BaseServer):
    """A model server that answers 200 with a body that is not a Responses object."""

    answer: dict = {"hello": 1}

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()

        @app.post("/v1/responses")
        async def responses() -> dict:
            return self.answer

        return app


@pytest.mark.parametrize(
    "answer", [{"hello": 1}, {"error": {"message": "overloaded"}, "output": []}, {"output": [{"type": {}}]}]
)
def test_a_model_answering_something_else_gives_a_masked_record_never_a_zero(lab, answer):
    env = lab.serve(counter.CounterServer)
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve(HelloModel, answer=answer))
    (record,) = lab.run_many(agent, example_rows("counter")[:1])
    assert (record.mask_sample, record.failure_kind, record.failure_stage) == (True, "provider_unavailable", "agent")
    assert "not a Responses object" in record.failure_reason or "does not validate" in record.failure_reason
    assert env.server.session_state == {}
    with pytest.raises(ServerError) as err:
        agent.run(example_rows("counter")[0])
    assert err.value.status == 502 and err.value.failure.kind == "provider_unavailable"
