"""Cells on a two-node Ray cluster: placement, equality with a local run, concurrent sessions,
a cell killed mid-collection, a driver killed and resumed, code shipped from this module, the CLI."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from fastapi import Request

from gymlab import Lab
from gymlab.examples import environment_dir, example_rows, load_environment
from gymlab.testing.workers import wait_until

if os.environ.get("CI"):  # `make test` installs ray (the dev extra): under CI a missing ray is a failure
    import ray
else:
    ray = pytest.importorskip("ray")

counter = load_environment("counter")
ROOT = Path(__file__).resolve().parents[2]


def counter_rows(n: int) -> list[dict]:
    """``n`` counter rows, each its own start and target (1 to 4 steps)."""
    template = example_rows("counter")[0]
    rows = []
    for i in range(n):
        start, target = i, i + 1 + i % 4
        text = f"The counter starts at {start}. Use the increment tool, one step at a time, until it reads {target}."
        params = {**template["responses_create_params"], "input": [{"role": "user", "content": text}]}
        rows.append({"responses_create_params": params, "initial_count": start, "target": target})
    return rows


def essence(record) -> tuple:
    """What a deterministic policy makes the same in any run: no ids, no times."""
    r = record if isinstance(record, dict) else record.model_dump(mode="json")
    items = [
        (i.get("type"), i.get("name"), i.get("arguments"), i.get("output"), json.dumps(i.get("content")))
        for i in r["response"]["output"]
    ]
    return (r["_ng_task_index"], r["_ng_rollout_index"], r["reward"], r["mask_sample"], r.get("final_count"), items)


class WhereServer(counter.CounterServer):
    """A counter that says, in its verify answer, which node graded it and how many sessions it held;
    each increment takes 10 ms, so the sessions of a concurrent run are open side by side."""

    async def increment(self, request: Request, body: counter.IncrementRequest) -> dict:
        await asyncio.sleep(0.01)
        return await super().increment(request, body)

    async def verify(self, request: Request, body: counter.CounterVerifyRequest):
        held = len(self.session_state)
        answer = await super().verify(request, body)
        return {**answer.model_dump(), "node_id": ray.get_runtime_context().get_node_id(), "sessions_held": held}


@pytest.fixture(scope="module")
def lab(ray_cluster):
    with Lab() as lab:
        yield lab


@pytest.fixture(scope="module")
def pool(lab):
    """Two cells of WhereServer (this module's class) with the counter's policy: half a CPU each."""
    return lab.serve_pool(WhereServer, model=counter.policy, replicas=2, cpus_per_replica=0.5)


def test_cells_land_on_different_nodes(pool, node_ids):
    assert {c.node_id for c in pool.cells} == set(node_ids)
    assert "2 cells on 2 nodes" in repr(pool)
    html = pool._repr_html_()
    assert html.count("<tr>") == 3 and all(node[:12] in html for node in node_ids)


def test_a_class_of_this_module_runs_on_the_second_node(lab, pool, node_ids):
    records = lab.run_many(pool, counter_rows(4), repeats=2)
    graded_on = {r.model_dump()["node_id"] for r in records}
    assert node_ids[1] in graded_on and graded_on <= set(node_ids)
    assert records.mean_reward == 1.0


def test_pool_run_equals_local_run(lab, pool):
    rows = counter_rows(6)
    with Lab() as local:
        env = local.serve(WhereServer)
        agent = local.serve_agent("simple_agent", resources=env, model=local.serve_model(counter.policy))
        expected = local.run_many(agent, rows, repeats=3)
    got = lab.run_many(pool, rows, repeats=3)
    assert [essence(r) for r in got] == [essence(r) for r in expected]
    assert got.failures == {}


def test_a_row_orjson_refuses_reaches_its_cell_whole(pool):
    """A row holding an int past 64 bits (orjson refuses it) still goes to a cell's /run, and back in its record."""
    record = pool.run({**counter_rows(1)[0], "big": 10**30})
    assert (record.reward, record.mask_sample, record.model_dump().get("big")) == (1.0, False, 10**30)


def test_100_concurrent_counter_sessions_each_graded_on_its_own_state(lab, pool):
    rows = counter_rows(100)
    records = lab.run_many(pool, rows, concurrency=100)
    assert len(records) == 100
    for row, record in zip(rows, records):
        dumped = record.model_dump()
        assert (dumped["final_count"], record.reward) == (row["target"], 1.0)
        outputs = [json.loads(i.output)["count"] for i in record.response.output if i.type == "function_call_output"]
        assert outputs == list(range(row["initial_count"] + 1, row["target"] + 1))  # its own counter, step by step
    assert max(r.model_dump()["sessions_held"] for r in records) > 5  # sessions were open side by side
    assert all(c.done > 0 for c in pool.cells)


def test_an_episode_is_pinned_to_one_cell(lab, pool):
    row = counter_rows(3)[2]
    with lab.episode(pool, row) as ep:
        ep.seed()
        assert ep.call("increment", by=1) == {"count": 3}
        ep.run()
        record = ep.verify()
    assert (record.reward, record.model_dump()["final_count"]) == (1.0, row["target"])


async def slow_policy(request):
    """The counter's policy, a little slow, so rollouts are in flight when a cell dies."""
    await asyncio.sleep(0.05)
    return counter.policy(request)


def test_a_cell_killed_mid_collection_loses_and_duplicates_nothing(lab, tmp_path):
    from gymlab.collection.runner import collect

    pool = lab.serve_pool(counter.CounterServer, model=slow_policy, replicas=2, cpus_per_replica=0.25)
    rows, out = counter_rows(12), tmp_path / "run.jsonl"
    result: dict = {}
    thread = threading.Thread(
        target=lambda: result.update(
            r=collect(
                rows,
                out,
                agent_url=pool.replicas(),
                agent="simple_agent",
                repeats=3,
                concurrency=6,
                progress=False,
            )
        )
    )
    thread.start()
    victim, killed_with = pool.cells[1], []

    def kill_when_busy() -> bool:
        """Kill the victim's actor once rows are written and it has rollouts in flight."""
        if out.exists() and len(out.read_text().splitlines()) >= 6 and (busy := victim.in_flight) > 0:
            ray.kill(victim.actor)
            killed_with.append(busy)
            return True
        return False

    wait_until(kill_when_busy, 60, "rollouts written and some in flight in the victim cell")
    thread.join(120)
    collected = result["r"]
    keys = [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in collected.rollouts]
    assert sorted(keys) == [(t, k) for t in range(12) for k in range(3)]  # each (row, repeat) exactly once
    assert len(out.read_text().splitlines()) == 36 and collected.failures == []
    assert killed_with[0] > 0 and not victim.alive
    assert all(r["reward"] == 1.0 for r in collected.rollouts)
    survivor = pool.cells[0].actor
    pool.close()  # kills its actors (ray.kill lands asynchronously: ask until the actor is gone)
    wait_until(lambda: _gone(survivor), 60, "the pool's last actor killed")


def _gone(actor) -> bool:
    try:
        ray.get(actor.info.remote(), timeout=10)
    except ray.exceptions.RayActorError:
        return True
    except ray.exceptions.GetTimeoutError:
        pass
    return False


def write_config(folder: Path) -> Path:
    """The counter with simple_agent and a slow policy, as a YAML config of files."""
    (folder / "slow.py").write_text(
        "import time\n"
        "from gymlab.examples import load_environment\n"
        "_policy = load_environment('counter').policy\n"
        "def policy(request):\n"
        "    time.sleep(0.03)\n"
        "    return _policy(request)\n"
    )
    rows = folder / "rows.jsonl"
    rows.write_text("".join(json.dumps(r) + "\n" for r in counter_rows(8)))
    config = folder / "counter.yaml"
    config.write_text(
        f"counter:\n  resources_servers:\n    counter:\n      entrypoint: {environment_dir('counter') / 'app.py'}\n"
        "      num_replicas: 2\n"
        "counter_agent:\n  responses_api_agents:\n    simple_agent:\n"
        "      resources_server: {type: resources_servers, name: counter}\n"
        "      model_server: {type: responses_api_models, name: policy_model}\n"
        "      datasets:\n      - {name: example, type: example, jsonl_fpath: rows.jsonl}\n"
        "policy_model:\n  responses_api_models:\n    policy_model:\n      policy: slow.py:policy\n"
    )
    return config


def collect_command(config: Path, out: Path, address: str) -> list[str]:
    return [
        sys.executable, "-m", "gymlab", "collect", str(config), "--ray", "--address", address,
        "--cpus-per-replica", "0.25", "-n", "4", "-c", "2", "--no-progress", "-o", str(out),
    ]  # fmt: skip


def test_collect_ray_resumes_after_a_driver_kill_to_the_same_file(ray_cluster, tmp_path, capsys):
    from gymlab.cli import main

    config = write_config(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    whole = tmp_path / "whole.jsonl"  # the uninterrupted run: the same command in this process (Ray connected)
    assert main(collect_command(config, whole, ray_cluster.address)[3:]) == 0
    printed = capsys.readouterr()
    assert "32 rollouts" in printed.out and "2 cells on 2 nodes" in printed.err

    cut = tmp_path / "cut.jsonl"
    driver = subprocess.Popen(
        collect_command(config, cut, ray_cluster.address), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        wait_until(lambda: cut.exists() and len(cut.read_text().splitlines()) >= 5, 120, "the first lines written")
    finally:
        os.kill(driver.pid, signal.SIGKILL)
        driver.communicate()
    assert 5 <= len(cut.read_text().splitlines()) < 32
    resumed = subprocess.run(
        collect_command(config, cut, ray_cluster.address), env=env, capture_output=True, text=True, timeout=180
    )
    assert resumed.returncode == 0, resumed.stderr
    assert "already done" in resumed.stdout
    lines = lambda p: [json.loads(line) for line in p.read_text().splitlines()]  # noqa: E731
    assert [essence(r) for r in lines(cut)] == [essence(r) for r in lines(whole)]


def test_import_gymlab_does_not_import_ray():
    code = "import sys, gymlab; gymlab.Lab; import gymlab.lab.lab; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


def test_a_door_answers_run_through_the_cells_over_http(pool):
    """What ``gymlab serve CONFIG --ray`` prints: one URL per agent, /run through the cells."""
    import urllib.request

    from gymlab.cluster.front import serve_fronts

    fronts = serve_fronts(pool)
    try:
        url = fronts["simple_agent"].url
        row = counter_rows(2)[1]
        request = urllib.request.Request(
            url + "/run", json.dumps(row).encode(), {"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=60) as resp:
            answer = json.loads(resp.read())
        assert (answer["reward"], answer["final_count"]) == (1.0, row["target"])
        with urllib.request.urlopen(url + "/health", timeout=60) as resp:
            health = json.loads(resp.read())
        assert (health["cells"], health["live"], health["nodes"]) == (2, 2, 2)
    finally:
        for runner in fronts.values():
            runner.stop()


@pytest.mark.parametrize("value", [0, -1, "two", True])
def test_num_replicas_is_a_positive_whole_number(tmp_path, value):
    from gymlab.collection.config import load_config
    from gymlab.errors import ConfigError

    config = tmp_path / "c.yaml"
    config.write_text(
        "env:\n  resources_servers:\n    counter:\n"
        f"      entrypoint: {environment_dir('counter') / 'app.py'}\n      num_replicas: {json.dumps(value)}\n"
    )
    with pytest.raises(ConfigError, match="num_replicas"):
        load_config(config)


def test_num_replicas_sets_the_cells_of_a_config(tmp_path):
    from gymlab.cluster.pool import replicas_of
    from gymlab.collection.config import load_config

    config = load_config(write_config(tmp_path))
    assert config.servers["counter"].num_replicas == 2
    assert (replicas_of(config, None), replicas_of(config, 5)) == (2, 5)


def test_num_workers_keeps_its_meaning_in_a_cell(ray_cluster, tmp_path):
    """A counter with num_workers: 2 runs in its cell as gymlab serve runs it: a process and two
    workers; sessions still reach their own worker's counter."""
    from gymlab.cluster.pool import config_pool
    from gymlab.collection.config import load_config
    from gymlab.collection.runner import collect

    path = write_config(tmp_path)
    path.write_text(path.read_text().replace("num_replicas: 2", "num_workers: 2"))
    with config_pool(load_config(path), replicas=1, cpus_per_replica=0.25) as pool:
        (pid,) = pool.cells[0].info["processes"].values()
        workers = [p for p in Path("/proc").iterdir() if p.name.isdigit() and _ppid(p) == pid]
        assert len(workers) >= 2
        rows = counter_rows(6)
        result = collect(
            rows, tmp_path / "w.jsonl", agent_url=pool.replicas(), repeats=2, concurrency=4, progress=False
        )
    assert len(result.rollouts) == 12 and all(r["reward"] == 1.0 for r in result.rollouts)
    wait_until(lambda: not Path(f"/proc/{pid}").exists(), 30, "the server process stopped with its cell")


def _ppid(proc: Path) -> int | None:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def test_gymlab_serve_ray_gives_each_agent_a_door(ray_cluster, tmp_path):
    import urllib.request

    config = write_config(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "gymlab", "serve", str(config), "--ray", "--address", ray_cluster.address]
    server = subprocess.Popen(
        [*command, "--replicas", "1", "--cpus-per-replica", "0.25"], env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        first = server.stdout.readline()  # "counter_agent -> http://127.0.0.1:PORT (POST /run through 1 cell)"
        assert first.startswith("counter_agent -> "), first
        url = first.split()[2]
        row = counter_rows(3)[2]
        request = urllib.request.Request(
            url + "/run", json.dumps(row).encode(), {"Content-Type": "application/json"}, method="POST"
        )
        with urllib.request.urlopen(request, timeout=60) as resp:
            assert json.loads(resp.read())["final_count"] == row["target"]
    finally:
        os.kill(server.pid, signal.SIGTERM)  # it stops its cells and exits
        assert server.wait(60) == 0


def test_a_file_not_at_its_driver_path_is_found_in_the_working_dir_copy(tmp_path, monkeypatch):
    """On another machine Ray's working_dir copy holds the config's files under other paths."""
    from gymlab.cluster.recipe import Recipe, pack, unpack

    project = tmp_path / "project"
    (project / "envs").mkdir(parents=True)
    source = project / "envs" / "moved_env.py"
    source.write_text((environment_dir("counter") / "app.py").read_text())
    from gymlab.utils import import_file

    module = import_file(source, "gymlab_test_moved_env")
    files, blob = pack([Recipe("counter", "resources", module.CounterServer)], str(project))
    assert files == [(str(source), "gymlab_test_moved_env", "envs/moved_env.py")]
    copy = tmp_path / "node_copy"
    project.rename(copy)  # the driver's path is gone; the node's working directory holds the copy
    monkeypatch.chdir(copy)
    monkeypatch.delitem(sys.modules, "gymlab_test_moved_env")
    (recipe,) = unpack(files, blob)
    assert Path(sys.modules["gymlab_test_moved_env"].__file__) == copy / "envs" / "moved_env.py"
    assert recipe.server.__name__ == "CounterServer"


def test_a_pool_whose_every_cell_is_gone_answers_a_typed_status_0(lab):
    """``apost_run`` (the door's /run, ``pool.run``) on the run engine: with its one cell killed, the
    rollout fails at once as ``transport_peer_drop`` with status 0, never a hang and never a record."""
    from gymlab.errors import ServerError

    pool = lab.serve_pool(counter.CounterServer, model=counter.policy, replicas=1, cpus_per_replica=0.25)
    try:
        ray.kill(pool.cells[0].actor)
        wait_until(lambda: _gone(pool.cells[0].actor), 60, "the cell's actor killed")
        with pytest.raises(ServerError) as raised:
            pool.run(counter_rows(1)[0])
        error = raised.value
        assert (error.status, error.failure.kind) == (0, "transport_peer_drop") and "serve it again" in str(error)
        assert not pool.cells[0].alive and pool.cells[0].in_flight == 0
    finally:
        pool.close()
