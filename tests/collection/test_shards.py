"""Collection over several agent URLs and in shards, over real loopback HTTP (``Lab(wire=True)``): the
shards merged equal one uninterrupted run, an agent stopped mid-run loses and duplicates no rollout,
and shards that overlap with different content are refused with both files and lines named."""

from __future__ import annotations

import asyncio
import json
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlsplit

import pytest

import gymlab
from gymlab import BaseVerifyRequest, BaseVerifyResponse, Lab
from gymlab._sync import run_sync
from gymlab.cli import main as cli
from gymlab.collection import HttpReplica, ReplicaPool, collect, merge
from gymlab.collection.files import in_shard, output_paths, parse_shard, shard_of
from gymlab.errors import ConfigError, DatasetError
from gymlab.examples import example_rows, load_environment
from gymlab.protocol.failure_kinds import FAILURE_KINDS
from gymlab.testing.workers import wait_until

calculator = load_environment("calculator")
AGENT = "calculator_simple_agent"  # the agent the example rows name in their agent_ref


class Gate:
    """Verifies after the first ``after`` wait until ``opened`` is set (so a test can act mid-run)."""

    def __init__(self) -> None:
        self.after = 10**9
        self.verifies = self.waiting = 0
        self.opened = threading.Event()


GATE = Gate()


class GatedCalculator(calculator.CalculatorServer):
    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        GATE.verifies += 1
        if GATE.verifies > GATE.after:
            GATE.waiting += 1
            await asyncio.to_thread(GATE.opened.wait, 30)
        return await super().verify(body)


@pytest.fixture(scope="module")
def servers():
    """Over loopback HTTP, as on separate hosts: one environment, one model, two agent replicas."""
    with Lab(wire=True) as lab:
        env = lab.serve(GatedCalculator, name="calculator")
        model = lab.serve_model(calculator.policy)
        a, b = (lab.serve_agent("simple_agent", resources=env, model=model, name=n) for n in ("agent_a", "agent_b"))
        yield lab, env, model, a, b


@pytest.fixture(autouse=True)
def open_gate():
    GATE.__init__()
    GATE.opened.set()
    yield
    GATE.opened.set()


@pytest.fixture(scope="module")
def full_run(servers, tmp_path_factory):
    """The reference: one uninterrupted run on one agent URL."""
    _, _, _, a, _ = servers
    out = tmp_path_factory.mktemp("full") / "full.jsonl"
    collect(example_rows("calculator"), out, agent_url=a.url, repeats=2, concurrency=4, progress=False)
    return out


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


VOLATILE = {"duration_s", "created_at"}  # wall-clock fields; ids are random but their links are kept


def stable(record: dict) -> dict:
    """``record`` without timing fields, its generated ids renamed in order of first appearance."""
    names: dict[str, str] = {}

    def walk(value, key=None):
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items() if k not in VOLATILE}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if key in ("id", "call_id") and isinstance(value, str):
            return names.setdefault(value, f"<id {len(names)}>")
        return value

    return walk(record)


def test_shards_over_two_agent_urls_merged_equal_one_run(servers, full_run, tmp_path):
    _, _, _, a, b = servers
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in example_rows("calculator")))
    s1, s2, merged = tmp_path / "s1.jsonl", tmp_path / "s2.jsonl", tmp_path / "merged.jsonl"
    # shard 1 from the command line over both agent URLs, shard 2 from Python on agent b alone
    common = ["--input", str(rows), "-n", "2", "-c", "4", "--no-progress"]
    assert cli(["collect", "--agent-url", a.url, "--agent-url", b.url, "--shard", "1/2", "-o", str(s1), *common]) == 0
    collect(rows, s2, agent_url=[b.url], shard=(2, 2), repeats=2, concurrency=4, progress=False)
    # every repeat of a task in one shard, tasks split by index mod 2
    assert {r["_ng_task_index"] for r in lines(s1)} == {0, 2, 4}
    assert {r["_ng_task_index"] for r in lines(s2)} == {1, 3}
    assert len(lines(s1)) == 6 and len(lines(s2)) == 4

    assert cli(["merge", str(merged), str(s1), str(s2)]) == 0
    got, want = output_paths(merged), output_paths(full_run)
    assert [stable(r) for r in lines(got["rollouts"])] == [stable(r) for r in lines(want["rollouts"])]
    assert lines(got["materialized_inputs"]) == lines(want["materialized_inputs"])
    assert lines(got["failures"]) == lines(want["failures"]) == []
    assert json.loads(got["aggregate_metrics"].read_text()) == json.loads(want["aggregate_metrics"].read_text())
    # merging again (the same shards, through the Python API) writes the same files
    before = got["rollouts"].read_bytes()
    result = gymlab.merge(merged, s1, s2)
    assert got["rollouts"].read_bytes() == before and len(result.rollouts) == 10


def test_an_agent_stopped_mid_run_loses_and_duplicates_nothing(servers, full_run, tmp_path):
    lab, env, model, a, _ = servers
    doomed = lab.serve_agent("simple_agent", resources=env, model=model, name="agent_doomed")
    pool = ReplicaPool([a.url, doomed.url], reprobe_s=None)
    GATE.after, GATE.opened = 2, threading.Event()  # rollouts 3-6 wait in /verify, 4 more to go
    out = tmp_path / "run.jsonl"
    result: dict = {}
    worker = threading.Thread(
        target=lambda: result.setdefault(
            "run", collect(example_rows("calculator"), out, agent_url=pool, repeats=2, concurrency=4, progress=False)
        )
    )
    worker.start()
    try:
        wait_until(lambda: GATE.waiting == 4, 30, "four rollouts waiting in /verify")
        assert pool.in_flight() == {a.url: 2, doomed.url: 2}
        stopper = threading.Thread(target=doomed.stop)  # returns once its two rollouts are answered
        stopper.start()
        wait_until(lambda: refuses(doomed.url), 30, "the stopped agent refusing connections")
        GATE.opened.set()
        stopper.join(30)
        worker.join(60)
    finally:
        GATE.opened.set()
    run = result["run"]
    assert not stopper.is_alive() and not worker.is_alive()
    assert pool.live == [pool.replicas[0]]  # the stopped agent is out of rotation
    assert pool.started()[doomed.url] >= 3  # its two answered rollouts, then the one that found it gone
    assert run.failures == [] and lines(output_paths(out)["failures"]) == []
    keys = [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in lines(out)]
    assert keys == [(t, k) for t in range(5) for k in range(2)]  # each once, in order
    assert [stable(r) for r in lines(out)] == [stable(r) for r in lines(full_run)]
    # what a re-probe would find: the stopped agent absent, the other answering
    assert run_sync(HttpReplica(doomed.url).alive()) is False and run_sync(HttpReplica(a.url).alive()) is True


def refuses(url: str) -> bool:
    parts = urlsplit(url)
    try:
        socket.create_connection((parts.hostname, parts.port), timeout=1).close()
    except ConnectionRefusedError:
        return True
    except ConnectionResetError:  # a server mid-shutdown may reset the connection: ask again
        return False
    return False


def test_overlapping_shards_with_different_content_are_refused(full_run, tmp_path, capsys):
    s1, s2 = tmp_path / "s1.jsonl", tmp_path / "s2.jsonl"
    for suffix in ("", "_materialized_inputs", "_failures", "_aggregate_metrics"):
        ext = ".json" if suffix.endswith("metrics") else ".jsonl"
        shutil.copy(full_run.with_name(f"full{suffix}{ext}"), s1.with_name(f"s1{suffix}{ext}"))
    records = lines(s1)
    changed = [*records[:3], {**records[3], "reward": 0.0}]  # (task 1, repeat 1), line 4
    s2.write_text("".join(json.dumps(r) + "\n" for r in changed))
    with pytest.raises(
        DatasetError, match=r"s2\.jsonl:4: \(task 1, repeat 1\) is also in .*s1\.jsonl:4 with different"
    ):
        merge(tmp_path / "out.jsonl", s1, s2)
    assert not (tmp_path / "out.jsonl").exists()  # nothing written
    assert cli(["merge", str(tmp_path / "out.jsonl"), str(s1), str(s2)]) == 2
    assert "s2.jsonl:4" in capsys.readouterr().err

    # the same records twice are kept once; a failure that another shard's rollout supersedes is dropped
    s2.write_text("".join(json.dumps(r) + "\n" for r in records[:3]))
    failure = {"_ng_task_index": 1, "_ng_rollout_index": 1, "failure_kind": "transport_unreachable"}
    lost = {"_ng_task_index": 7, "_ng_rollout_index": 0, "failure_kind": "transport_unreachable"}
    output_paths(s2)["failures"].write_text(json.dumps(failure) + "\n" + json.dumps(lost) + "\n")
    result = merge(tmp_path / "out.jsonl", s1, s2)
    assert lines(tmp_path / "out.jsonl") == records
    assert result.failures == [lost] == lines(output_paths(tmp_path / "out.jsonl")["failures"])

    # an existing output whose records the merge lacks is not replaced unless asked
    kept = (tmp_path / "out.jsonl").read_bytes()
    with pytest.raises(DatasetError, match=r"out\.jsonl:4: the output exists and its \(task 1, repeat 1\) is in none"):
        merge(tmp_path / "out.jsonl", s2)
    assert (tmp_path / "out.jsonl").read_bytes() == kept
    assert cli(["merge", str(tmp_path / "out.jsonl"), str(s2)]) == 2
    assert "--force" in capsys.readouterr().err
    assert cli(["merge", "--force", str(tmp_path / "out.jsonl"), str(s2)]) == 0
    assert lines(tmp_path / "out.jsonl") == records[:3]
    assert merge(s1, s1, s2).output == s1  # the output is one of the shards: no --force needed


def test_shard_choice_and_its_errors(tmp_path, capsys):
    jobs = [{"_ng_task_index": t, "_ng_rollout_index": r} for t in range(5) for r in range(3)]
    parts = [list(in_shard(jobs, (i, 3))) for i in (1, 2, 3)]
    assert sorted(map(str, sum(parts, []))) == sorted(map(str, jobs))  # a partition
    assert {j["_ng_task_index"] for j in parts[0]} == {0, 3}
    assert parse_shard("2/4") == (2, 4)
    assert shard_of(7, 4) == 4
    for bad in ("0/2", "3/2", "1", "a/b", (0, 1)):
        with pytest.raises(ConfigError, match="1 <= i <= n"):
            parse_shard(bad)
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in example_rows("calculator")))
    out = tmp_path / "out.jsonl"
    argv = ["collect", "--agent-url", "http://127.0.0.1:9", "-i", str(rows), "-o", str(out), "--shard", "3/2"]
    assert cli(argv) == 2
    assert "gymlab collect: error: shard '3/2': expected i/n with 1 <= i <= n" in capsys.readouterr().err


def test_a_shard_that_is_not_a_pair_is_a_config_error_not_a_crash():
    for bad in ((1, 2, 3), (1,), 2, None):
        with pytest.raises(ConfigError, match=r"shard .*: expected i/n with 1 <= i <= n"):
            parse_shard(bad)


def test_an_unfinished_shard_is_refused_unless_allowed_partial(servers, full_run, tmp_path, capsys):
    """A shard's collect killed midway (SIGKILL of the real command) leaves inputs without rollouts:
    the merge refuses it, or with --allow-partial writes each missing key as a masked failure."""
    _, _, _, a, _ = servers
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in example_rows("calculator")))
    s1, s2, out = tmp_path / "s1.jsonl", tmp_path / "s2.jsonl", tmp_path / "out.jsonl"
    collect(rows, s2, agent_url=a.url, shard=(2, 2), repeats=2, progress=False)
    GATE.verifies, GATE.after, GATE.opened = 0, 2, threading.Event()  # two finish, the next two wait
    argv = ["collect", "--agent-url", a.url, "-i", str(rows), "-o", str(s1), "--shard", "1/2", "-n", "2", "-c", "2"]
    proc = subprocess.Popen([sys.executable, "-m", "gymlab.cli", *argv, "--no-progress"], stderr=subprocess.PIPE)
    try:
        wait_until(
            lambda: GATE.waiting == 2 and s1.exists() and len(lines(s1)) == 2, 60, "two rollouts written, two waiting"
        )
    finally:
        proc.kill()
        proc.wait(30)
        GATE.opened.set()
    assert len(lines(output_paths(s1)["materialized_inputs"])) == 6 and len(lines(s1)) == 2

    with pytest.raises(DatasetError, match=r"s1_materialized_inputs\.jsonl:\d+: \(task \d, repeat \d\) and 3 more"):
        merge(out, s1, s2)
    assert cli(["merge", str(out), str(s1), str(s2)]) == 2
    assert "--allow-partial" in capsys.readouterr().err and not out.exists()

    assert cli(["merge", "--allow-partial", str(out), str(s1), str(s2)]) == 0
    done = {(r["_ng_task_index"], r["_ng_rollout_index"]) for r in lines(out)}
    failed = lines(output_paths(out)["failures"])
    assert len(done) == 6 and len(failed) == 4  # 2 of shard 1 and 4 of shard 2 done; 4 never finished
    assert done | {(f["_ng_task_index"], f["_ng_rollout_index"]) for f in failed} == {
        (t, r) for t in range(5) for r in range(2)
    }
    assert {(f["failure_kind"], f["mask_sample"], f["attempts"]) for f in failed} == {("cancelled", True, 0)}
    assert all(f["failure_kind"] in FAILURE_KINDS and "s1_materialized_inputs" in f["failure_reason"] for f in failed)


def test_shards_of_different_input_rows_are_refused(servers, tmp_path, capsys):
    _, _, _, a, _ = servers
    rows = example_rows("calculator")
    other = [*rows[:3], {**rows[3], "expected": "something else"}, *rows[4:]]  # task 3: shard 2's
    s1, s2, out = tmp_path / "s1.jsonl", tmp_path / "s2.jsonl", tmp_path / "out.jsonl"
    collect(rows, s1, agent_url=a.url, shard=(1, 2), progress=False)
    collect(other, s2, agent_url=a.url, shard=(2, 2), progress=False)
    assert cli(["merge", str(out), str(s1), str(s2)]) == 2
    err = capsys.readouterr().err
    assert "s2_shard.json: this shard was collected from other input rows, options or shard count than" in err
    assert "s1_shard.json" in err and not out.exists()
    collect(rows, s2.with_name("s3.jsonl"), agent_url=a.url, shard=(2, 2), progress=False)  # the same rows
    assert cli(["merge", str(out), str(s1), str(tmp_path / "s3.jsonl")]) == 0 and len(lines(out)) == 5
    assert not output_paths(out)["shard"].exists()  # the merged output is a whole collection
    collect(rows, tmp_path / "s4.jsonl", agent_url=a.url, shard=(2, 3), progress=False)  # another shard count
    assert cli(["merge", str(tmp_path / "o3.jsonl"), str(s1), str(tmp_path / "s4.jsonl")]) == 2
    assert "of 3 shards vs" in capsys.readouterr().err
    output_paths(s2)["shard"].write_text("{not json")
    assert cli(["merge", str(tmp_path / "o2.jsonl"), str(s1), str(s2)]) == 2
    assert "s2_shard.json: not a shard record" in capsys.readouterr().err
