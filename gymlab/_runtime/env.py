"""What a server process is started with: its config in a private file ``CONFIG_ENV`` names, and its tie
to its parent (standard library only: ``tied`` runs this file before exec'ing a command; docs/runtime.md)."""

from __future__ import annotations

import json
import os
import signal
import sys
import tempfile
from typing import Any

#: The variable that holds the path of the server's config file (read by ``server`` and ``workers``).
CONFIG_ENV = "GYMLAB_SERVER_CONFIG"


def write_config(config: dict[str, Any], directory: str | None = None) -> str:
    """``config`` as JSON in a new file only this user can read (in ``directory``, else the temp dir); its path."""
    fd, path = tempfile.mkstemp(prefix="gymlab-config-", suffix=".json", dir=directory)
    with os.fdopen(fd, "w") as f:
        json.dump(config, f)
    return path


def read_config() -> dict[str, Any]:
    """The config in the file ``CONFIG_ENV`` names ({} when it names none)."""
    path = os.environ.get(CONFIG_ENV)
    if not path:
        return {}
    with open(path, "rb") as f:
        return json.load(f)


#: The pid of the process that started this one, which this one must not outlive.
PARENT_ENV = "GYMLAB_PARENT_PID"


def die_with_parent(parent: int, sig: int = signal.SIGTERM) -> None:
    """Have the kernel send ``sig`` to this process when ``parent`` exits (Linux), or now if it is gone."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, int(sig))  # PR_SET_PDEATHSIG (kept across exec)
    if os.getppid() != parent:  # the parent died before the tie was made
        os.kill(os.getpid(), sig)


def tied(command: list[str], sig: int = signal.SIGKILL) -> list[str]:
    """``command`` as a command line that dies (``sig``) when this process does: this file execs it."""
    return [sys.executable, "-I", "-S", os.path.abspath(__file__), str(os.getpid()), str(int(sig)), *command]


if __name__ == "__main__":
    die_with_parent(int(sys.argv[1]), int(sys.argv[2]))
    os.execvp(sys.argv[3], sys.argv[3:])
