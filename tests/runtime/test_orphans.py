"""A process gymlab starts dies with its parent, a SIGKILL of the parent included: ``gymlab serve``'s
servers, a launcher's workers, and the workers' private directory (the session secret's file) with them.
Real processes on loopback; each test kills only the process it started, then waits on conditions."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gymlab._runtime.workers import SECRET_FILE, WORKERS_ENV
from gymlab.examples import environment_dir
from gymlab.testing.workers import process_gone, serve_entrypoint, wait_until
from tests.cli.test_cli import serving

psutil = pytest.importorskip("psutil")

COUNTER = environment_dir("counter")
#: Starting and stopping real servers on a loaded 2-core machine; passing tests never wait it out.
DEADLINE_S = 120.0


def refuses(url: str) -> bool:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    with socket.socket() as s:
        s.settimeout(10)
        return s.connect_ex((host, int(port))) != 0


def worker_dirs(pids: list[int]) -> set[str]:
    """The private directories (secret, table, sockets) the workers among ``pids`` were started with."""
    dirs = set()
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            if raw := psutil.Process(pid).environ().get(WORKERS_ENV):
                dirs.add(json.loads(raw)["dir"])
    return dirs


def descendants(pid: int) -> list[int]:
    return [p.pid for p in psutil.Process(pid).children(recursive=True)]


def _kill_leftovers(pids: list[int]) -> None:
    for pid in pids:  # only when the test failed: what it started, by pid
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def test_sigkill_of_gymlab_serve_takes_its_servers_workers_and_secret_file(tmp_path):
    config = tmp_path / "counter.yaml"
    config.write_text(f"""
counter:
  resources_servers:
    counter:
      entrypoint: {COUNTER / "app.py"}
      num_workers: 2
counter_simple_agent:
  responses_api_agents:
    simple_agent:
      resources_server: {{type: resources_servers, name: counter}}
      model_server: {{type: responses_api_models, name: policy_model}}
policy_model:
  responses_api_models:
    policy_model:
      policy: {COUNTER / "app.py"}:policy
""")
    with serving(config, 3) as (proc, urls, _lines):
        assert len(urls) == 3 and not any(refuses(u) for u in urls.values())
        started = descendants(proc.pid)
        dirs = worker_dirs(started)
        assert len(dirs) == 1 and (Path(*dirs) / SECRET_FILE).exists()
        try:
            proc.send_signal(signal.SIGKILL)  # gymlab serve alone: no handler, no finally runs
            proc.wait(DEADLINE_S)
            wait_until(lambda: all(refuses(u) for u in urls.values()), DEADLINE_S, "every server's port refuses")
            wait_until(lambda: all(process_gone(p) for p in started), DEADLINE_S, "every server and worker exited")
            wait_until(lambda: not any(Path(d).exists() for d in dirs), DEADLINE_S, "the workers' directory removed")
        finally:
            _kill_leftovers([p for p in started if not process_gone(p)])


def test_sigkill_of_a_worker_launcher_takes_its_workers_and_secret_file():
    with serve_entrypoint(COUNTER / "app.py", workers=4) as served:
        workers = served.worker_pids()
        assert len(workers) == 4
        (state_dir,) = worker_dirs(workers)
        assert (Path(state_dir) / SECRET_FILE).exists()
        try:
            served.process.send_signal(signal.SIGKILL)  # the launcher alone, not its process group
            served.process.wait(DEADLINE_S)
            wait_until(lambda: refuses(served.url), DEADLINE_S, "the port refuses")
            wait_until(lambda: all(process_gone(p) for p in workers), DEADLINE_S, "every worker exited")
            wait_until(lambda: not Path(state_dir).exists(), DEADLINE_S, "the secret's directory removed")
        finally:
            _kill_leftovers([p for p in workers if not process_gone(p)])


def test_a_foreign_command_tied_to_this_process_dies_with_it_even_ignoring_sigterm(tmp_path):
    """``tied``: how an MCP server's command line is launched. Its parent here is a shell we SIGKILL."""
    stubborn = (
        "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print(flush=True); time.sleep(600)"
    )
    code = (
        "import subprocess, sys\n"
        "from gymlab._runtime.env import tied\n"
        f"child = subprocess.Popen(tied([sys.executable, '-c', {stubborn!r}]), stdout=subprocess.PIPE)\n"
        "child.stdout.readline()\n"
        "print(child.pid, flush=True)\n"
        "sys.stdin.readline()\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH")])),
    }
    parent = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    child = int(parent.stdout.readline())
    try:
        assert not process_gone(child)
        parent.send_signal(signal.SIGKILL)
        parent.wait(DEADLINE_S)
        wait_until(lambda: process_gone(child), DEADLINE_S, "the tied command exited")
    finally:
        _kill_leftovers([child] if not process_gone(child) else [])
