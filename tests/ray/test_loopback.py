"""A local Ray cluster gymlab starts (``address=None``) listens on loopback only: every listening
socket of its processes (GCS, raylets, agents, workers, the cells' servers) is on 127.0.0.1, and
cells still run episodes on it. The cluster runs in a child process whose first Ray import is
gymlab's, as in a script or a fresh kernel."""

from __future__ import annotations

import ipaddress
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

if os.environ.get("CI"):  # `make test` installs ray (the dev extra): under CI a missing ray is a failure
    import ray  # noqa: F401
else:
    pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")

ROOT = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 300  # a cluster, a cell and an episode on a loaded machine

DRIVER = """
import json, sys
from gymlab import Lab
from gymlab.examples import example_rows, load_environment

counter = load_environment("counter")
with Lab() as lab:
    pool = lab.serve_pool(counter.CounterServer, model=counter.policy, replicas=1, cpus_per_replica=0.25)
    record = pool.run(example_rows("counter")[0])
    print(json.dumps({"reward": record.reward, "node_ip": pool.cells[0].node_ip}), flush=True)
    sys.stdin.readline()  # the test reads the sockets meanwhile
"""


def loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip.split("%")[0])
    mapped = getattr(address, "ipv4_mapped", None)
    return (mapped or address).is_loopback


def listening(processes) -> dict[str, list[str]]:
    """``name pid`` -> the addresses each of ``processes`` listens on (TCP and UDP)."""
    found: dict[str, list[str]] = {}
    for process in processes:
        try:
            for conn in process.net_connections(kind="inet"):
                if conn.status == psutil.CONN_LISTEN or (conn.type == socket.SOCK_DGRAM and not conn.raddr):
                    found.setdefault(f"{process.name()} {process.pid}", []).append(conn.laddr.ip)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def test_a_local_cluster_listens_on_loopback_only(tmp_path):
    # a fresh process: none of the RAY_* variables a cluster this session started left in os.environ
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    # its own session folder and home (the auth token), beside the session's cluster (short: socket paths)
    env["RAY_TMPDIR"] = env["HOME"] = tempfile.mkdtemp(prefix="rl")
    driver = subprocess.Popen(
        [sys.executable, "-c", DRIVER],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    tree = psutil.Process(driver.pid)
    started: list = []
    try:
        ready, _, _ = select.select([driver.stdout], [], [], START_TIMEOUT_S)
        assert ready, f"no episode within {START_TIMEOUT_S} s"
        line = driver.stdout.readline()  # after a whole episode in a cell: every process is up
        assert line, "the driver exited before running its episode"
        answer = json.loads(line)
        started = [tree, *tree.children(recursive=True)]
        sockets = listening(started)
        names = " ".join(sockets)
        assert "gcs_server" in names and "raylet" in names  # Ray's own servers were seen
        assert any("Cell" in n or "python" in n for n in sockets)
        outside = {who: ips for who, ips in sockets.items() if not all(loopback(ip) for ip in ips)}
        assert outside == {}, outside
        assert answer == {"reward": 1.0, "node_ip": "127.0.0.1"}
        driver.stdin.write("\n")
        driver.stdin.flush()
        assert driver.wait(120) == 0
    finally:
        if driver.poll() is None:
            started = started or [tree, *tree.children(recursive=True)]
            for process in started:  # what this test started, by pid
                try:
                    process.kill()
                except psutil.NoSuchProcess:
                    pass
            driver.wait(30)
        shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)
