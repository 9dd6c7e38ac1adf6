"""One server of a config, in the foreground: ``python -m gymlab.collection.serve_one`` (``gymlab serve``
runs it); its config comes in the private file ``CONFIG_ENV`` names, its import target in ``TARGET_ENV``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Sequence
from typing import Any

#: The import target of the server class (``/abs/app.py``, ``/abs/app.py:Class``, ``module:Class``).
TARGET_ENV = "GYMLAB_SERVER_TARGET"
#: Where the server was declared, for error messages (``file: instance.type.implementation``).
WHERE_ENV = "GYMLAB_SERVER_WHERE"


def spawn(config: dict, target: str, where: str, **popen):
    """Start one server of a config as ``python -m gymlab.collection.serve_one`` (``popen``: more Popen options)."""
    from gymlab._runtime.env import CONFIG_ENV, PARENT_ENV, write_config

    path = write_config(config)
    env = {**os.environ, CONFIG_ENV: path, TARGET_ENV: target, WHERE_ENV: where, PARENT_ENV: str(os.getpid())}
    try:
        return subprocess.Popen([sys.executable, "-m", "gymlab.collection.serve_one"], env=env, **popen)
    except BaseException:
        os.unlink(path)
        raise


def wait_healthy(process: Any, url: str, timeout: float) -> str | None:
    """Wait until the ``spawn``ed server answers ``url/health``: None, else why it never will."""
    from gymlab._runtime.serve import answers_health

    deadline = time.monotonic() + timeout
    while not answers_health(url):
        if process.poll() is not None:
            return f"exited with code {process.returncode} before answering /health"
        if time.monotonic() > deadline:
            return f"did not answer {url}/health within {timeout:.0f}s"
        time.sleep(0.05)  # a process that is starting has nothing to wait on but its port
    return None


def stop(processes: Sequence[subprocess.Popen], timeout: float = 10.0) -> None:
    """Terminate ``processes`` (the last started first); kill those still running after ``timeout`` seconds."""
    for process in reversed(processes):
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + timeout
    for process in processes:
        try:
            process.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def main() -> int:
    from gymlab._runtime.env import CONFIG_ENV, PARENT_ENV, die_with_parent, read_config
    from gymlab.collection.imports import build_server
    from gymlab.errors import GymlabError

    if parent := os.environ.pop(PARENT_ENV, None):  # popped: this server's own children are not its
        die_with_parent(int(parent))
    where = os.environ.get(WHERE_ENV, "")
    try:
        try:
            config = read_config()
        finally:
            os.unlink(os.environ.pop(CONFIG_ENV))
        build_server(os.environ[TARGET_ENV], config, where=where).run_webserver()
    except GymlabError as exc:
        print(f"gymlab serve: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
