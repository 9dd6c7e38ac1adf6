"""Servers run on httptools and uvloop where installed, and fall back to h11 and asyncio cleanly where
they are not (a platform without wheels), with the same answers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from gymlab._runtime import stack
from gymlab._sync import STACK_ENV, new_event_loop
from gymlab.examples import environment_dir, example_rows

ROOT = Path(__file__).resolve().parents[2]


def test_the_fast_stack_is_named_where_it_is_installed():
    pytest.importorskip("httptools")
    pytest.importorskip("uvloop")
    options = stack.uvicorn_options()
    assert (options["http"], options["loop"]) == ("httptools", "uvloop")
    loop = new_event_loop()
    try:
        assert type(loop).__module__.startswith("uvloop")
    finally:
        loop.close()


def test_the_asyncio_stack_can_be_chosen(monkeypatch):
    monkeypatch.setenv(STACK_ENV, "asyncio")
    options = stack.uvicorn_options()
    assert (options["http"], options["loop"]) == ("h11", "asyncio")
    loop = new_event_loop()
    try:
        assert type(loop).__module__.startswith("asyncio")
    finally:
        loop.close()


def _hidden(tmp_path: Path) -> Path:
    """A folder whose httptools and uvloop raise ImportError, as if no wheel had been installed."""
    for name in ("httptools", "uvloop"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "__init__.py").write_text("raise ImportError('not installed here')\n")
    return tmp_path


def test_gymlab_serve_runs_an_episode_without_httptools_and_uvloop(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(_hidden(tmp_path)), str(ROOT)])}
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            "from gymlab._runtime.stack import uvicorn_options as o; print(o()['http'], o()['loop'])",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.split() == ["h11", "asyncio"]
    config = environment_dir("calculator") / "configs" / "calculator.yaml"
    proc = subprocess.Popen(
        [sys.executable, "-m", "gymlab", "serve", str(config)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        urls = {}
        deadline = time.monotonic() + 120
        for line in proc.stdout:
            if " -> http://" in line:
                name, url = line.strip().split(" -> ")
                urls[name] = url
            if "servers are up" in line or time.monotonic() > deadline:
                break
        assert "calculator_simple_agent" in urls, f"gymlab serve did not start: {urls}"
        reply = httpx.post(urls["calculator_simple_agent"] + "/run", json=example_rows("calculator")[0], timeout=60)
        assert reply.status_code == 200 and json.loads(reply.text)["reward"] == 1.0
    finally:
        proc.terminate()
        proc.wait(30)
