"""The CLI end to end: the calculator config served by ``gymlab serve`` (real processes on loopback)
and collected by ``gymlab collect``; ``--dry-run``; ``gymlab list``; one-line errors."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CALCULATOR_YAML = ROOT / "environments" / "calculator" / "configs" / "calculator.yaml"
EXAMPLE_ROWS = ROOT / "environments" / "calculator" / "data" / "example.jsonl"


#: how long to wait for what a loaded 2-core CI machine does slowly (start servers, stop them, collect)
DEADLINE_S = 180


def gymlab(*args: str, timeout: float = DEADLINE_S) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "gymlab.cli", *args], capture_output=True, text=True, timeout=timeout, cwd=ROOT
    )


def port_open(url: str) -> bool:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.socket() as s:
        s.settimeout(10)  # a closed port on loopback refuses at once; an open one may be slow to accept
        return s.connect_ex((host, int(port))) == 0


@contextlib.contextmanager
def serving(config: Path, n_servers: int, env: dict | None = None):
    """``gymlab serve CONFIG``: yields (process, {name: url}, stdout lines); always stopped and reaped."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gymlab.cli", "serve", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
        env=env,
    )
    out: queue.Queue = queue.Queue()
    threading.Thread(target=lambda: [out.put(line) for line in proc.stdout], daemon=True).start()
    urls: dict[str, str] = {}
    lines: list[str] = []
    try:
        deadline = time.monotonic() + DEADLINE_S
        while not any(f"all {n_servers} servers are up" in line for line in lines):
            assert proc.poll() is None, "gymlab serve exited early"
            try:
                line = out.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"gymlab serve did not come up within {DEADLINE_S} s")
            lines.append(line)
            if m := re.fullmatch(r"(\S+) -> (http://\S+)\n", line):
                urls[m.group(1)] = m.group(2)
        yield proc, urls, lines
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(60)
            except subprocess.TimeoutExpired:
                pass
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # anything left of the process group
        except ProcessLookupError:
            pass
        proc.wait(10)


@pytest.fixture
def served():
    with serving(CALCULATOR_YAML, 3) as running:
        yield running


def test_serve_then_collect_the_calculator_end_to_end(served, tmp_path):
    proc, urls, lines = served
    assert set(urls) == {"policy_model", "calculator", "calculator_simple_agent"}, "".join(lines)
    order = [line.split(" -> ")[0] for line in lines if " -> " in line]
    assert order.index("calculator_simple_agent") > order.index("calculator")  # refs start first
    out = tmp_path / "calc.jsonl"
    done = gymlab(
        "collect",
        "--agent-url",
        urls["calculator_simple_agent"],
        "--resources-url",
        urls["calculator"],
        "--input",
        str(EXAMPLE_ROWS),
        "-o",
        str(out),
        "-n",
        "2",
        "--no-progress",
    )
    assert done.returncode == 0, done.stderr
    assert "10 rollouts" in done.stdout and "mean reward 1.000" in done.stdout
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in records] == [
        (t, k) for t in range(5) for k in range(2)
    ]
    assert all(r["reward"] == 1.0 for r in records)
    final = [i for i in records[0]["response"]["output"] if i["type"] == "message"][-1]
    assert final["content"][0]["text"] == "The answer is 16."  # 4 squared, by the served /square tool
    metrics = json.loads((tmp_path / "calc_aggregate_metrics.json").read_text())
    assert metrics["calculator_simple_agent"]["agent_metrics"]["num_samples"] == 10
    # SIGTERM stops every server process.
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(60) == 0
    assert not any(port_open(url) for url in urls.values())


def test_collect_serves_a_config_in_process(tmp_path):
    out = tmp_path / "calc.jsonl"
    done = gymlab("collect", str(CALCULATOR_YAML), "-o", str(out), "--no-progress")
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 5 and all(r["reward"] == 1.0 for r in records)
    assert {r["agent_ref"]["name"] for r in records} == {"calculator_simple_agent"}


def test_dry_run_prints_the_plan_and_starts_nothing():
    done = gymlab("serve", "--dry-run", str(CALCULATOR_YAML))
    assert done.returncode == 0, done.stderr
    names = [line.split()[0] for line in done.stdout.splitlines()[:3]]
    assert names == ["policy_model", "calculator", "calculator_simple_agent"]
    assert "config OK (dry run, nothing started)" in done.stdout


def test_list_shows_environments_agents_and_datasets():
    done = gymlab("list", "--json", str(CALCULATOR_YAML))
    assert done.returncode == 0, done.stderr
    info = json.loads(done.stdout)
    assert [e["name"] for e in info["environments"]] == ["calculator"]
    assert info["agents"][0]["refs"] == {"resources_server": "calculator", "model_server": "policy_model"}
    assert [(d["name"], d["type"]) for d in info["datasets"]] == [("example", "example")]
    assert info["tasksets"] == []
    text = gymlab("list", str(CALCULATOR_YAML)).stdout
    assert "agents:\n  calculator_simple_agent" in text


def test_a_config_mistake_is_one_line_and_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(CALCULATOR_YAML.read_text().replace("name: calculator\n", "name: calculater\n"))
    for command in (["serve", "--dry-run"], ["list"], ["collect", "-o", str(tmp_path / "o.jsonl")]):
        done = gymlab(*command, str(bad))
        assert done.returncode == 2, (command, done.stderr)
        assert "Traceback" not in done.stderr
        [line] = done.stderr.strip().splitlines()
        assert str(bad) in line and "resources_server.name" in line and "'calculater'" in line


def test_collect_without_servers_or_config_says_what_to_give(tmp_path):
    done = gymlab("collect", "-o", str(tmp_path / "o.jsonl"))
    assert done.returncode == 2
    assert done.stderr.strip() == (
        "gymlab collect: error: give --agent-url and --input, or a CONFIG whose servers to run"
    )


def test_serve_runs_a_server_with_several_workers(tmp_path):
    counter = ROOT / "environments" / "counter"
    config = tmp_path / "counter.yaml"
    config.write_text(f"""
counter:
  resources_servers:
    counter:
      entrypoint: {counter / "app.py"}
      num_workers: 2
counter_simple_agent:
  responses_api_agents:
    simple_agent:
      resources_server: {{type: resources_servers, name: counter}}
      model_server: {{type: responses_api_models, name: policy_model}}
policy_model:
  responses_api_models:
    policy_model:
      policy: {counter / "app.py"}:policy
""")
    with serving(config, 3) as (_proc, urls, _lines):
        done = gymlab(
            "collect",
            "--agent-url",
            urls["counter_simple_agent"],
            "--input",
            str(counter / "data" / "example.jsonl"),
            "-o",
            str(tmp_path / "c.jsonl"),
            "-n",
            "4",
            "-c",
            "8",
            "--no-progress",
        )
    assert done.returncode == 0, done.stderr
    records = [json.loads(line) for line in (tmp_path / "c.jsonl").read_text().splitlines()]
    assert len(records) == 20 and all(r["reward"] == 1.0 for r in records)  # state found its worker every step


def test_dry_run_refuses_workers_for_a_server_that_cannot_have_them(tmp_path):
    (tmp_path / "app.py").write_text(
        "from gymlab import BaseVerifyRequest, BaseVerifyResponse, SimpleResourcesServer\n\n\n"
        "class Plain(SimpleResourcesServer):\n"
        "    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:\n"
        "        return BaseVerifyResponse(**body.model_dump(), reward=1.0)\n"
    )
    (tmp_path / "c.yaml").write_text(
        "plain:\n  resources_servers:\n    plain:\n      entrypoint: app.py\n      num_workers: 3\n"
    )
    done = gymlab("serve", "--dry-run", str(tmp_path / "c.yaml"))
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "plain.resources_servers.plain.num_workers: Plain: num_workers=3 needs" in done.stderr


NOTES_APP = """
import os

from gymlab import BaseVerifyRequest, BaseVerifyResponse, SimpleResourcesServer
from gymlab.utils import is_gymlab_fastapi_entrypoint


class Notes(SimpleResourcesServer):
    notes: str = ""

    def setup_webserver(self):
        app = super().setup_webserver()

        @app.post("/notes")
        async def notes() -> dict:
            return {"length": len(self.notes), "pid": os.getpid()}

        return app

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=1.0)


if is_gymlab_fastapi_entrypoint(__file__):
    app = Notes.run_webserver()
"""


def test_a_200_kib_config_field_reaches_every_server_process_in_a_private_file(tmp_path):
    """Configs once travelled in an environment variable: 200 KiB passed --dry-run, then the exec
    died with "Argument list too long". Now a 0600 file carries it, gone when the server stops."""
    import urllib.request

    (tmp_path / "app.py").write_text(NOTES_APP)
    blob = "n" * (200 * 1024)
    servers = {"one": 1, "two": 2}
    (tmp_path / "c.yaml").write_text(
        "".join(
            f"{name}:\n  resources_servers:\n    notes:\n      entrypoint: app.py\n"
            f"      num_workers: {n}\n      notes: {blob}\n"
            for name, n in servers.items()
        )
    )
    assert gymlab("serve", "--dry-run", str(tmp_path / "c.yaml")).returncode == 0
    private = tmp_path / "tmp"
    private.mkdir()
    with serving(tmp_path / "c.yaml", 2, env={**os.environ, "TMPDIR": str(private)}) as (proc, urls, _):
        for url in urls.values():
            request = urllib.request.Request(url + "/notes", data=b"{}", headers={"content-type": "application/json"})
            with urllib.request.urlopen(request, timeout=DEADLINE_S) as answer:
                assert json.loads(answer.read())["length"] == len(blob)
        files = list(private.rglob("gymlab-config-*"))  # the one-worker server's was removed once read
        assert len(files) == 1 and files[0].parent.name.startswith("gymlab-workers-")
        assert files[0].stat().st_mode & 0o777 == 0o600 and json.loads(files[0].read_text())["notes"] == blob
        group = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _group(int(p.name)) == proc.pid]
        assert len(group) >= 5  # serve, two servers, two workers
        for pid in group:
            with contextlib.suppress(OSError):
                assert blob[:1000].encode() not in (Path("/proc") / str(pid) / "environ").read_bytes()
    assert list(private.rglob("gymlab-config-*")) == []


def _group(pid: int) -> int | None:
    try:
        return os.getpgid(pid)
    except OSError:
        return None


HOSTILE_CONFIGS = {
    # 20,000 levels: a RecursionError of 2,992 lines before
    "deep": (
        b"calculator:\n  resources_servers:\n    calculator:\n      x: " + b"[" * 20000 + b"]" * 20000 + b"\n",
        ":4: nested deeper than 100 levels",
    ),
    "not_utf8": (
        b"calculator:\n  resources_servers:\n    calculator:\n      domain: caf\xe9\n",
        ":4: not UTF-8 text (byte 66)",
    ),
    "passwd": (
        b"calculator:\n  resources_servers:\n    calculator:\n      entrypoint: /etc/passwd\n",
        ": calculator.resources_servers.calculator: entrypoint /etc/passwd is not a Python file (.py)",
    ),
    "not_python": (
        b"calculator:\n  resources_servers:\n    calculator:\n      entrypoint: notes.py\n",
        ": calculator.resources_servers.calculator: entrypoint ",
    ),
    "duplicate_instance": (
        b"calculator:\n  resources_servers:\n    calculator: {}\ncalculator:\n  resources_servers:\n    other: {}\n",
        ":4: key 'calculator' appears twice in one mapping (first on line 1)",
    ),
    "duplicate_field": (
        b"calculator:\n  resources_servers:\n    calculator:\n      port: 1\n      domain: a\n      port: 2\n",
        ":6: key 'port' appears twice in one mapping (first on line 4)",
    ),
}


@pytest.mark.parametrize("case", sorted(HOSTILE_CONFIGS))
def test_a_hostile_config_is_one_line_naming_the_file_and_where(case, tmp_path):
    text, expected = HOSTILE_CONFIGS[case]
    (tmp_path / "notes.py").write_text("this is not python (\n")
    (tmp_path / "c.yaml").write_bytes(text)
    commands = [["serve", "--dry-run"]] + ([["list"]] if case not in ("passwd", "not_python") else [])
    for command in commands:  # (list imports no entrypoint)
        done = gymlab(*command, str(tmp_path / "c.yaml"))
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-2000:]
        [line] = done.stderr.splitlines()
        assert f"{tmp_path / 'c.yaml'}{expected}" in line, line
    if case == "not_python":
        assert "cannot be imported: SyntaxError" in line and "notes.py" in line


def test_a_task_index_that_is_not_a_whole_number_is_refused_before_anything_runs(tmp_path):
    """A string _ng_task_index once resumed as a new key every run, then crashed the metrics."""
    row = json.loads(EXAMPLE_ROWS.read_text().splitlines()[0])
    for bad in ("3", 1.5, -1, True, None):
        (tmp_path / "rows.jsonl").write_text(json.dumps(row) + "\n" + json.dumps({**row, "_ng_task_index": bad}) + "\n")
        out = tmp_path / "o.jsonl"
        done = gymlab(
            "collect", "--agent-url", "http://127.0.0.1:9", "-i", str(tmp_path / "rows.jsonl"), "-o", str(out)
        )
        assert done.returncode == 2 and "Traceback" not in done.stderr
        [line] = done.stderr.splitlines()
        assert f"rows:2: _ng_task_index is a whole number >= 0 (it names the task in every file), got {bad!r}" in line
        assert not out.exists() or out.read_text() == ""
