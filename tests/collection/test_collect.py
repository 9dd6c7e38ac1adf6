"""Rollout collection over real loopback servers: the four files, NeMo Gym rows unchanged, resume after
a torn line or a SIGKILL (none lost, none duplicated), bounded retries recorded with a failure_kind."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from gymlab import AggregateMetrics, AggregateMetricsRequest, BaseVerifyRequest, BaseVerifyResponse
from gymlab.collection import HttpReplica, ReplicaPool, acollect, collect
from gymlab.collection.files import output_paths
from gymlab.errors import ConfigError, DatasetError
from gymlab.examples import example_rows, load_environment
from gymlab.lab import Lab
from gymlab.resources.simple import aggregate_metrics

ROOT = Path(__file__).resolve().parents[2]
CalculatorServer = load_environment("calculator").CalculatorServer


class MarkedCalculator(CalculatorServer):
    """The calculator whose /aggregate_metrics says it answered (so the file provably came from it)."""

    async def aggregate_metrics(self, body: AggregateMetricsRequest) -> AggregateMetrics:
        metrics = aggregate_metrics(body.verify_responses)
        metrics.key_metrics["answered_by"] = self.name
        return metrics


ATTEMPTS: dict[str, int] = {}


class FlakyCalculator(CalculatorServer):
    """Fails /verify for the question about 13, counting every attempt in ``ATTEMPTS``."""

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        text = " ".join(i.text for i in body.responses_create_params.input_items() if i.type == "message")
        if "13" in text:
            ATTEMPTS["13"] = ATTEMPTS.get("13", 0) + 1
            raise RuntimeError("verifier crashed")
        return await super().verify(body)


@pytest.fixture
def calc_agent(lab, calculator):
    env = lab.serve(MarkedCalculator, name="calculator")
    model = lab.serve_model(calculator.policy)
    agent = lab.serve_agent("simple_agent", resources=env, model=model, name="calculator_simple_agent")
    return agent, env


class BrokenMetrics(CalculatorServer):
    """The calculator whose /aggregate_metrics crashes."""

    async def aggregate_metrics(self, body: AggregateMetricsRequest) -> AggregateMetrics:
        raise RuntimeError("metrics crashed")


def test_a_failed_aggregate_metrics_is_computed_here_from_the_streamed_body(lab, calculator, tmp_path, capsys):
    env = lab.serve(BrokenMetrics, name="broken")
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(calculator.policy))
    rows = [{**row, "source_id": 2**70 + 1} for row in example_rows("calculator")]  # a past-64-bit field in the body
    result = collect(rows, tmp_path / "run.jsonl", agent_url=agent.url, resources_url=env.url, progress=False)
    assert "calculator_simple_agent: /aggregate_metrics failed" in capsys.readouterr().err  # the rows' agent_ref
    metrics = result.aggregate_metrics["calculator_simple_agent"]
    assert metrics == aggregate_metrics(result.rollouts).model_dump(mode="json")
    assert metrics["agent_metrics"]["num_samples"] == len(rows)


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_collect_writes_the_four_files_in_aabbcc_order(calc_agent, tmp_path):
    agent, env = calc_agent
    rows = example_rows("calculator")
    result = collect(
        rows,
        tmp_path / "run.jsonl",
        agent_url=agent.url,
        resources_url=env.url,
        repeats=2,
        concurrency=4,
        progress=False,
    )
    paths = output_paths(tmp_path / "run.jsonl")
    records = lines(paths["rollouts"])
    assert [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in records] == [
        (t, k) for t in range(5) for k in range(2)
    ]
    assert all(r["reward"] == 1.0 and r["agent_ref"]["name"] == "calculator_simple_agent" for r in records)
    assert {"responses_create_params", "response", "reward", "mask_sample", "steps"} <= set(records[0])
    assert lines(paths["failures"]) == []
    assert [(m["_ng_task_index"], m["_ng_rollout_index"]) for m in lines(paths["materialized_inputs"])] == [
        (r["_ng_task_index"], r["_ng_rollout_index"]) for r in records
    ]
    metrics = json.loads(paths["aggregate_metrics"].read_text())["calculator_simple_agent"]
    assert metrics["key_metrics"]["answered_by"] == "calculator"  # from the server's /aggregate_metrics
    assert metrics["agent_metrics"]["mean/reward"] == 1.0 and metrics["agent_metrics"]["num_samples"] == 10
    assert result.rollouts == records and result.n_new == 10 and result.mean_reward == 1.0


def test_nemo_gym_rows_are_collected_unchanged(calc_agent, tmp_path):
    agent, env = calc_agent
    # Wire-reference rows: the request, an agent_ref, and the environment's own extra fields.
    source = tmp_path / "nemo.jsonl"
    rows = [
        {**row, "expected_answer": str(n * n), "metadata_field": {"difficulty": "easy", "tags": ["a", "b"]}}
        for row, n in zip(example_rows("calculator"), (4, 7, 12, 3, 9))
    ]
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    before = source.read_bytes()
    collect(source, tmp_path / "out.jsonl", agent_url=agent.url, resources_url=env.url, progress=False)
    assert source.read_bytes() == before
    sent = lines(output_paths(tmp_path / "out.jsonl")["materialized_inputs"])
    assert sent == [{**row, "_ng_task_index": i, "_ng_rollout_index": 0} for i, row in enumerate(rows)]
    out = lines(tmp_path / "out.jsonl")
    assert [r["agent_ref"] for r in out] == [row["agent_ref"] for row in rows]
    assert all(r["reward"] == 1.0 for r in out)


async def test_a_rerun_skips_finished_pairs(calc_agent, tmp_path):
    agent, env = calc_agent
    rows = example_rows("calculator")
    first = await acollect(rows, tmp_path / "run.jsonl", agent_url=agent.url, repeats=2, limit=2, progress=False)
    assert first.n_new == 4
    kept = first.rollouts  # read from the file when asked: the file as it is now
    second = await acollect(rows, tmp_path / "run.jsonl", agent_url=agent.url, repeats=2, progress=False)
    assert (second.n_new, second.n_skipped) == (6, 4)
    records = lines(tmp_path / "run.jsonl")
    assert [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in records] == [
        (t, k) for t in range(5) for k in range(2)
    ]
    assert records[:4] == kept  # the earlier rollouts are kept, not redone


async def test_a_torn_last_line_is_cut_off_with_a_message_and_rerun(calc_agent, tmp_path, capsys):
    agent, _env = calc_agent
    rows = example_rows("calculator")[:3]
    first = (await acollect(rows, tmp_path / "run.jsonl", agent_url=agent.url, progress=False)).rollouts
    path = tmp_path / "run.jsonl"
    text = path.read_text().splitlines(keepends=True)
    path.write_text(text[0] + text[1] + text[2][: len(text[2]) // 2])  # a crash mid-write of the third line
    again = await acollect(rows, path, agent_url=agent.url, progress=False)
    assert "removed a partial last line" in capsys.readouterr().err
    assert (again.n_new, again.n_skipped) == (1, 2)
    assert lines(path)[:2] == first[:2]
    assert [r["_ng_task_index"] for r in lines(path)] == [0, 1, 2]


async def test_a_damaged_complete_line_is_an_error_not_a_loss(calc_agent, tmp_path):
    agent, _env = calc_agent
    rows = example_rows("calculator")[:2]
    await acollect(rows, tmp_path / "run.jsonl", agent_url=agent.url, progress=False)
    path = tmp_path / "run.jsonl"
    good = path.read_text().splitlines()
    path.write_text("{broken\n" + good[1] + "\n")
    with pytest.raises(DatasetError, match=r"run\.jsonl:1: damaged rollouts line"):
        await acollect(rows, path, agent_url=agent.url, progress=False)
    assert path.read_text() == "{broken\n" + good[1] + "\n"


async def test_resuming_onto_other_inputs_is_refused(calc_agent, tmp_path):
    agent, _env = calc_agent
    rows = example_rows("calculator")
    big = [{**rows[0], "source_id": 2**70 + 1}]  # past 64 bits: read back exact, so the same row resumes
    await acollect(big, tmp_path / "big.jsonl", agent_url=agent.url, progress=False)
    again = await acollect(big, tmp_path / "big.jsonl", agent_url=agent.url, progress=False)
    assert (again.n_skipped, again.n_new) == (1, 0)
    await acollect(rows[:1], tmp_path / "run.jsonl", agent_url=agent.url, progress=False)
    with pytest.raises(ConfigError, match="task 0 repeat 0 was collected from a different input row"):
        await acollect(rows[1:2], tmp_path / "run.jsonl", agent_url=agent.url, progress=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_a_verifier_error_is_attempted_once_and_recorded_with_its_kind(calculator, tmp_path):
    """A verifier that raises fails the same way every time: one attempt, whatever ``max_retries``."""
    ATTEMPTS.clear()
    with Lab(wire=True) as lab:  # every hop over loopback HTTP
        env = lab.serve(FlakyCalculator, name="flaky")
        agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(calculator.policy))
        rows = example_rows("calculator")
        rows.append(
            {
                **rows[0],
                "responses_create_params": {
                    **rows[0]["responses_create_params"],
                    "input": [{"role": "user", "content": "What is 13 squared?"}],
                },
            }
        )
        result = await acollect(
            rows, tmp_path / "run.jsonl", agent_url=agent.url, max_retries=2, backoff_s=0.01, progress=False
        )
        assert ATTEMPTS["13"] == 1  # a deterministic failure is never retried
        [failure] = lines(output_paths(tmp_path / "run.jsonl")["failures"])
        assert (
            failure["_ng_task_index"] == 5
            and failure["failure_kind"] == "verifier_error"
            and failure["failure_stage"] == "verification"
        )
        assert failure["attempts"] == 1 and "verifier crashed" in failure["failure_reason"]
        assert len(result.rollouts) == 5 and result.failures == [failure]
        # A rerun runs only the failure (once again), and it is still recorded once.
        again = await acollect(rows, tmp_path / "run.jsonl", agent_url=agent.url, max_retries=2, progress=False)
        assert (again.n_new, again.n_skipped, len(again.failures)) == (0, 5, 1)
        assert ATTEMPTS["13"] == 2


async def test_an_agent_that_refuses_then_comes_up_is_retried(calculator, tmp_path):
    """``transport_unreachable`` may pass: the rollout is retried with backoff and recorded once."""
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    pool = ReplicaPool([HttpReplica(url, server="late_agent")])
    with Lab(wire=True) as lab:
        env = lab.serve(CalculatorServer, name="calculator")
        model = lab.serve_model(calculator.policy)
        task = asyncio.ensure_future(
            acollect(
                example_rows("calculator")[:1],
                tmp_path / "run.jsonl",
                agent_url=pool,
                max_retries=4,
                backoff_s=1.0,
                progress=False,
            )
        )
        while not (pool.started()[url] == 1 and pool.in_flight()[url] == 0) and not task.done():
            await asyncio.sleep(0.01)  # the first attempt was refused; the retry waits its backoff
        assert not task.done(), task.result().failures
        await asyncio.to_thread(
            lab.serve_agent, "simple_agent", resources=env, model=model, name="late_agent", port=port
        )
        result = await task
    assert result.failures == [] and result.n_new == 1
    [record] = result.rollouts
    assert record["reward"] == 1.0 and not record["mask_sample"]
    assert pool.started()[url] >= 2  # refused, then run


async def test_an_unreachable_agent_is_recorded_not_raised(tmp_path):
    rows = example_rows("calculator")[:1]
    result = await acollect(
        rows,
        tmp_path / "run.jsonl",
        agent_url="http://127.0.0.1:9",
        agent="gone",
        max_retries=1,
        backoff_s=0.01,
        retry_span_s=2.0,
        stop_after=None,  # (by default the breaker would stop this run, a row that never gets through, and say so)
        progress=False,
    )
    [failure] = result.failures
    assert failure["failure_kind"] == "transport_unreachable" and failure["failure_stage"] == "admission"
    assert failure["attempts"] > 2  # retried on past max_retries while its failures spanned under 2 s


SLOW_APP = """
import asyncio
import itertools
import os

from gymlab import BaseVerifyRequest, BaseVerifyResponse, SimpleResourcesServer


class Graded(SimpleResourcesServer):
    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=1.0)


CALLS = itertools.count(1)
HOLD_AFTER = int(os.environ.get("HOLD_AFTER", "0"))  # calls answered before the rest wait for the signal


async def policy(request):
    if HOLD_AFTER and next(CALLS) > HOLD_AFTER:
        await asyncio.sleep(120)  # the collection is surely still running when it is stopped
    return "done"
"""

SLOW_CONFIG = """
graded:
  resources_servers:
    graded:
      entrypoint: app.py
slow_agent:
  responses_api_agents:
    simple_agent:
      resources_server: {type: resources_servers, name: graded}
      model_server: {type: responses_api_models, name: slow_model}
      datasets:
      - {name: rows, type: example, jsonl_fpath: rows.jsonl}
slow_model:
  responses_api_models:
    policy_model:
      policy: app.py:policy
"""


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT], ids=["killed", "interrupted"])
def test_a_collection_stopped_halfway_and_rerun_has_each_pair_exactly_once(tmp_path, sig):
    """A SIGKILL, or Ctrl-C (``run_sync``'s one interrupt path: the episodes cancelled, the servers
    stopped, exit 130), leaves only whole records; the rerun finishes the rest, each pair once."""
    (tmp_path / "app.py").write_text(textwrap.dedent(SLOW_APP))
    (tmp_path / "config.yaml").write_text(textwrap.dedent(SLOW_CONFIG))
    n_rows, repeats = 40, 2
    (tmp_path / "rows.jsonl").write_text(
        "".join(json.dumps({"responses_create_params": {"input": f"task {i}"}}) + "\n" for i in range(n_rows))
    )
    out = tmp_path / "out" / "run.jsonl"
    # Ctrl-C's own handler, unblocked, whatever this process passes on (a background job ignores SIGINT)
    ctrl_c = (
        "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "signal.pthread_sigmask(signal.SIG_UNBLOCK, [signal.SIGINT]); from gymlab.cli import main"
    )
    cmd = [
        sys.executable,
        "-c",
        f"{ctrl_c}; sys.exit(main(sys.argv[1:]))",
        "collect",
        str(tmp_path / "config.yaml"),
        "-o",
        str(out),
        "-n",
        str(repeats),
        "-c",
        "4",
        "--no-progress",
    ]
    held = {**os.environ, "HOLD_AFTER": "8"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True, env=held)
    try:
        deadline = time.monotonic() + 60
        while not (out.exists() and out.read_text().count("\n") >= 6):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the collection wrote nothing within 60 s"
            time.sleep(0.02)
        os.kill(proc.pid, sig)
        proc.wait(60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    if sig == signal.SIGKILL:
        assert proc.returncode == -signal.SIGKILL
    else:
        assert proc.returncode == 130 and "gymlab collect: interrupted" in proc.stderr.read().decode()
    survived = [json.loads(line) for line in out.read_bytes().split(b"\n")[:-1]]  # complete lines only
    assert 6 <= len(survived) < n_rows * repeats
    rerun = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    records = lines(out)
    keys = [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in records]
    assert keys == [(t, k) for t in range(n_rows) for k in range(repeats)]  # none lost, none duplicated
    by_key = {(r["_ng_task_index"], r["_ng_rollout_index"]): r for r in records}
    for record in survived:  # what finished before the kill is kept as it was, not redone
        assert by_key[(record["_ng_task_index"], record["_ng_rollout_index"])] == record
    new, skipped = map(int, re.search(r"\((\d+) new, (\d+) already done\)", rerun.stdout).groups())
    assert new + skipped == n_rows * repeats
    assert skipped - len(survived) in (0, 1)  # 1: the kill fell between a record and its newline


def test_a_taskset_dataset_is_collated_and_routed_to_its_environment_server(tmp_path):
    from gymlab.cli import main

    calc = ROOT / "environments" / "calculator"
    source = calc / "data" / "example.jsonl"
    before = source.read_bytes()
    (tmp_path / "config.yaml").write_text(
        textwrap.dedent(f"""
        environment_server_routes:
          calc: calculator_env
        calculator_env:
          environment_servers:
            single_agent_turn:
              resources_server: {{type: resources_servers, name: calculator}}
              agent_server: {{type: responses_api_agents, name: calculator_simple_agent}}
        calculator:
          resources_servers:
            calculator:
              entrypoint: {calc / "app.py"}
              datasets:
              - {{name: calc_bench, type: benchmark, taskset: calc, jsonl_fpath: {source}}}
        calculator_simple_agent:
          responses_api_agents:
            simple_agent:
              resources_server: {{type: resources_servers, name: calculator}}
              model_server: {{type: responses_api_models, name: policy_model}}
        policy_model:
          responses_api_models:
            policy_model:
              policy: {calc / "app.py"}:policy
    """)
    )
    out = tmp_path / "bench.jsonl"
    assert main(["collect", str(tmp_path / "config.yaml"), "-o", str(out), "-n", "2", "--no-progress"]) == 0
    records = lines(out)
    assert [r["task_id"] for r in records] == [f"calc/{i}" for i in range(5) for _ in range(2)]
    assert all(r["reward"] == 1.0 for r in records)
    assert {r["agent_ref"]["name"] for r in records} == {"calculator_env"}
    sent = lines(output_paths(out)["materialized_inputs"])
    assert sent[0]["task_input"] == json.loads(before.splitlines()[0])  # the flat row, whole, in task_input
    assert source.read_bytes() == before
    # Run-level request overrides are refused for taskset rows, with a one-line error.
    assert (
        main(
            [
                "collect",
                str(tmp_path / "config.yaml"),
                "-o",
                str(out),
                "--no-progress",
                "--responses-create-params",
                '{"temperature": 0}',
            ]
        )
        == 2
    )


async def test_a_bad_input_file_line_is_named_before_anything_runs(tmp_path):
    source = tmp_path / "rows.jsonl"
    good = json.dumps(example_rows("calculator")[0])
    source.write_text(good + "\n\n" + json.dumps({"responses_create_params": {"input": "x", "tempreture": 1}}) + "\n")
    with pytest.raises(DatasetError, match=r"rows\.jsonl:3: invalid responses_create_params: unknown key 'tempreture'"):
        await acollect(source, tmp_path / "out.jsonl", agent_url="http://127.0.0.1:9", progress=False)
    assert not (tmp_path / "out.jsonl").exists()


def test_a_config_is_collected_by_a_python_call(tmp_path):
    """``gymlab.collect(config, ...)``: the config's servers served for the run, its datasets collected."""
    import gymlab
    from gymlab.collection.config import load_config

    config = ROOT / "environments" / "calculator" / "configs" / "calculator.yaml"
    result = gymlab.collect(config, tmp_path / "run.jsonl", repeats=2, progress=False)
    assert (result.n_rollouts, result.n_failures, result.mean_reward) == (10, 0, 1.0)
    assert {r["agent_ref"]["name"] for r in result.rollouts} == {"calculator_simple_agent"}
    metrics = json.loads(result.paths["aggregate_metrics"].read_text())
    # the calculator's metrics are the default: tallied as the file was read, equal to its route's answer
    assert metrics["calculator_simple_agent"] == aggregate_metrics(result.rollouts).model_dump(mode="json")
    assert metrics["calculator_simple_agent"]["agent_metrics"]["num_samples"] == 10
    again = gymlab.collect(load_config(config), tmp_path / "run.jsonl", repeats=2, progress=False)
    assert (again.n_new, again.n_skipped) == (0, 10)  # a loaded config too; the rerun resumes


async def test_a_failure_that_a_rerun_finishes_leaves_the_failures_file(calc_agent, tmp_path):
    agent, _env = calc_agent
    rows = example_rows("calculator")[:2]
    out = tmp_path / "run.jsonl"
    gone = await acollect(rows, out, agent_url="http://127.0.0.1:9", max_retries=0, progress=False)
    assert gone.n_failures == 2 and gone.n_rollouts == 0
    done = await acollect(rows, out, agent_url=agent.url, progress=False)
    assert (done.n_new, done.n_rollouts, done.n_failures) == (2, 2, 0)
    assert output_paths(out)["failures"].read_text() == ""


def test_metrics_tallied_one_record_at_a_time_equal_the_routes_answer():
    """``MetricsTally`` is the route's own rule: masked samples counted and left out, groups by task."""
    from gymlab.resources.simple import MetricsTally, default_metrics

    responses = [
        {"_ng_task_index": i % 3, "reward": r, "mask_sample": m}
        for i, (r, m) in enumerate([(1.0, False), (0.0, False), (0.5, True), (0.25, False), (1.0, False), (0.0, True)])
    ]
    tally = MetricsTally()
    for r in responses:
        tally.add(r)
    metrics = tally.result()
    assert metrics == aggregate_metrics(iter(responses))
    assert (metrics.agent_metrics["num_samples"], metrics.agent_metrics["num_masked"]) == (6, 2)
    assert metrics.agent_metrics["mean/reward"] == 2.25 / 4
    assert [g["num_rollouts"] for g in metrics.group_level_metrics] == [2, 2]  # task 2's two were masked
    assert default_metrics(CalculatorServer()) and not default_metrics(MarkedCalculator())


def test_an_appended_file_is_rewritten_in_task_repeat_order_the_last_line_of_a_key_winning(tmp_path):
    from gymlab.collection.files import rewrite_sorted
    from gymlab.errors import DatasetError

    path = tmp_path / "run.jsonl"
    lines = [
        {"_ng_task_index": 2, "_ng_rollout_index": 0, "v": "a"},
        {"_ng_task_index": 0, "_ng_rollout_index": 1, "v": "b"},
        {"_ng_task_index": 10, "_ng_rollout_index": 0, "v": "c"},
        {"_ng_task_index": 2, "_ng_rollout_index": 0, "v": "a again"},  # a retry's line: it wins
        {"_ng_task_index": 0, "_ng_rollout_index": 0, "v": "d"},
    ]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    assert rewrite_sorted(path, keep=lambda key: key != (10, 0)) == 3
    assert [
        (r["_ng_task_index"], r["_ng_rollout_index"], r["v"]) for r in map(json.loads, path.read_text().splitlines())
    ] == [
        (0, 0, "d"),
        (0, 1, "b"),
        (2, 0, "a again"),
    ]
    path.write_text(
        json.dumps({"_ng_task_index": 0, "_ng_rollout_index": 0}) + "\n" + json.dumps({"_ng_task_index": "x"}) + "\n"
    )
    with pytest.raises(DatasetError, match=r"run\.jsonl:2: task and repeat indices must be whole numbers"):
        rewrite_sorted(path)
    assert json.loads(path.read_text().splitlines()[1]) == {"_ng_task_index": "x"}  # nothing is lost
