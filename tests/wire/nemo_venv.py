"""NeMo Gym 0.7.0 run as it ships, from its own venv (Python 3.13), for the tests behind the ``nemo`` marker.

``make test-nemo`` makes the venv (``.venv-nemo``, or the one ``NEMO_VENV`` names) and runs those
tests; elsewhere they skip, saying so. Each NeMo server is its own process and gets its whole config
from ``NEMO_GYM_CONFIG_DICT`` (no head server), its instance named by ``NEMO_GYM_CONFIG_PATH``.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gymlab.testing.workers import wait_until

REPO = Path(__file__).resolve().parents[2]
NEMO_VENV = Path(os.environ.get("NEMO_VENV") or REPO / ".venv-nemo").absolute()  # servers run in tmp folders
NEMO_PYTHON, GYM = NEMO_VENV / "bin" / "python", NEMO_VENV / "bin" / "gym"

MARKS = [
    pytest.mark.nemo,
    pytest.mark.skipif(
        not GYM.exists(),
        reason=f"NeMo Gym 0.7.0 is not installed in {NEMO_VENV} (`make test-nemo` installs it and runs these tests)",
    ),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def where(url: str) -> dict:
    """A server's ``host`` and ``port`` as NeMo's config holds them."""
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    return {"host": host, "port": int(port)}


def module_file(module: str) -> str:
    """Where a module of NeMo's venv lives (its servers run as scripts, ``python app.py``)."""
    out = subprocess.run(
        [str(NEMO_PYTHON), "-c", f"import {module} as m; print(m.__file__)"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return out.stdout.strip()


def nemo_environ(config: dict, instance: str | None = None) -> dict[str, str]:
    """The environment a NeMo process reads its config from (this venv's PYTHONPATH left out)."""
    environ = {**os.environ, "NEMO_GYM_CONFIG_DICT": json.dumps({"dry_run": False, **config})}
    environ.pop("PYTHONPATH", None)
    if instance is not None:
        environ["NEMO_GYM_CONFIG_PATH"] = instance
    return environ


def wait_healthy(url: str, proc: subprocess.Popen, log: Path, timeout: float = 120.0) -> None:
    """Until NeMo's server answers ``/health`` (a separate process with no readiness signal); its
    log's tail in the error when it exits or never answers."""

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"NeMo's server exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            return httpx.get(f"{url}/health", timeout=5).status_code == 200
        except httpx.TransportError:
            return False

    try:
        wait_until(up, timeout, f"NeMo's server at {url} answering /health")
    except AssertionError as exc:
        if proc.poll() is not None:
            raise
        raise AssertionError(f"{exc}:\n{log.read_text()[-3000:]}") from None


@contextlib.contextmanager
def nemo_server(argv: list[str], environ: dict[str, str], url: str, log: Path, cwd: Path) -> Iterator[None]:
    """One NeMo server process, answering at ``url`` inside the block and stopped after it."""
    with log.open("w") as out:
        proc = subprocess.Popen(argv, env=environ, cwd=cwd, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_healthy(url, proc, log)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
