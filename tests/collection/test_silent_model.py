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
from gymlab._http.retry import RETRY_SPAN_S
from gymlab.examples import example_rows, load_environment
from gymlab.run.engine import RunStopped
from gymlab.testing.workers import wait_until

counter = load_environment("counter")


async def silent(request):
    """A model that accepts the request and never answers."""
    await asyncio.Event().wait()


def test_collect_with_default_options_on_a_silent_model_stops_early_and_says_why(lab, tmp_path):
    """Every call times out: the run stops once its first tries all failed alike (the breaker), each
    started row written with its failure, the rows not started never attempted. Before, 40 rows
    went on for every row's retries (with 300 s model timeouts, 915 s for 4 rows)."""
    env = lab.serve(counter.CounterServer)
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(silent), timeouts={"model": 0.5})
    rows = example_rows("counter")
    t0 = time.monotonic()
    with pytest.raises(RunStopped, match=r"the first \d+ tries all failed with transport_timeout .*within 0\.5 s"):
        collect(rows, tmp_path / "run.jsonl", agent_url=agent.url, repeats=10, progress=False)  # default options
    took = time.monotonic() - t0
    assert RETRY_SPAN_S <= took < RETRY_SPAN_S + 30  # 40 rows, 16 at a time: three rounds of retries without it
    assert (tmp_path / "run.jsonl").read_text() == ""
    failures = [json.loads(line) for line in (tmp_path / "run_failures.jsonl").read_text().splitlines()]
    assert len(failures) == 16  # the rows started (concurrency 16); the other 24 were never attempted
    assert {(f["failure_kind"], f["failure_stage"]) for f in failures} == {("transport_timeout", "agent")}
    assert all("within 0.5 s" in f["failure_reason"] and f["attempts"] >= 1 for f in failures)
    wait_until(lambda: env.server.session_state == {}, 30, "every seeded counter released")


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


#: The CLI's --retry-span here: a 0.5 s model timeout tried four times and backed off takes 3 s at most.
SPAN_S = 6.0


@pytest.mark.parametrize("stop_after", [None, "0"], ids=["default", "never"])
def test_the_collect_command_on_a_silent_model_says_why_it_stopped(tmp_path, stop_after):
    from gymlab.examples import environment_dir

    (tmp_path / "app.py").write_text(textwrap.dedent(SILENT_APP))
    (tmp_path / "config.yaml").write_text(
        textwrap.dedent(SILENT_CONFIG).format(
            counter=environment_dir("counter") / "app.py", rows=environment_dir("counter") / "data" / "example.jsonl"
        )
    )
    out = tmp_path / "run.jsonl"
    argv = ["collect", str(tmp_path / "config.yaml"), "-o", str(out), "--no-progress", "--retry-span", str(SPAN_S)]
    argv += ["--stop-after", stop_after] if stop_after else []
    proc = subprocess.run([sys.executable, "-m", "gymlab.cli", *argv], capture_output=True, text=True, timeout=180)
    failures = [json.loads(line) for line in (tmp_path / "run_failures.jsonl").read_text().splitlines()]
    assert len(failures) == len(example_rows("counter")) and out.read_text() == ""
    assert {f["failure_kind"] for f in failures} == {"transport_timeout"}
    if stop_after is None:  # the breaker: exit 2 and the cause, in one line
        assert proc.returncode == 2, proc.stderr
        [line] = proc.stderr.splitlines()
        assert "gymlab collect: error: stopped after the first" in line and "transport_timeout" in line
    else:  # never stopped: every row's retries, spanning SPAN_S (more tries than max_retries + 1)
        assert proc.returncode == 1, proc.stderr  # some rollouts failed: they are in the failures file
        assert all(f["attempts"] > 3 for f in failures)


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
