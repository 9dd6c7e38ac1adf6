"""Serve an entrypoint with several uvicorn workers, for tests of a server under ``num_workers > 1``."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: How long the workers may take to start on a busy machine.
START_TIMEOUT_S = 120.0


@dataclass
class Served:
    """A running multi-worker server: its URL, the launcher process and its log file."""

    url: str
    process: subprocess.Popen
    log: Path

    def worker_pids(self) -> list[int]:
        """The live worker processes (children of the launcher)."""
        pids = []
        for task in Path(f"/proc/{self.process.pid}/task").iterdir():
            children = (task / "children").read_text().split()
            pids += [int(p) for p in children if "spawn_main" in _cmdline(int(p))]
        return [p for p in pids if not process_gone(p)]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def process_gone(pid: int) -> bool:
    """True when ``pid`` has exited (or is a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def wait_until(predicate, timeout: float = 30.0, what: str = "condition") -> None:
    """Poll ``predicate`` until it holds; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached within {timeout:g} s")
        time.sleep(0.02)


@contextlib.contextmanager
def serve_entrypoint(entrypoint: str | os.PathLike, workers: int = 4, **config: Any) -> Iterator[Served]:
    """``python entrypoint`` with ``num_workers=workers`` on a free loopback port; stopped on exit."""
    from gymlab._runtime.env import CONFIG_ENV, write_config

    config_file = write_config({"num_workers": workers, "port": 0, **config})
    env = dict(os.environ, **{CONFIG_ENV: config_file})
    log = tempfile.NamedTemporaryFile("w+", prefix=f"gymlab-{Path(entrypoint).stem}-", suffix=".log", delete=False)
    proc = subprocess.Popen(
        [sys.executable, str(entrypoint)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=log,
        start_new_session=True,
        text=True,
    )
    assert proc.stdout is not None  # stdout=PIPE
    try:
        ready, _, _ = select.select([proc.stdout], [], [], START_TIMEOUT_S)
        line = proc.stdout.readline() if ready else ""
        if "serving" not in line:
            raise RuntimeError(f"{entrypoint} did not start: {line!r} (exit {proc.poll()}); log: {log.name}")
        served = Served(line.split(" on ", 1)[1].split()[0], proc, Path(log.name))
        wait_until(
            lambda: served.log.read_text().count("Application startup complete") >= workers,
            START_TIMEOUT_S,
            f"{workers} workers started",
        )
        yield served
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(15)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(5)
        log.close()
        os.unlink(log.name)
        os.unlink(config_file)


__all__ = ["Served", "process_gone", "serve_entrypoint", "wait_until"]
