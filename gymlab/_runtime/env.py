"""What a server process is started with: the environment variables it reads, and its tie to its parent.

A process gymlab starts (a config's server, a worker, an MCP server) dies with the process that
started it, however that one ends, a SIGKILL included: ``die_with_parent`` in the child. Only the
standard library here: ``python -I -S env.py PARENT SIGNAL COMMAND...`` runs it before exec'ing a
foreign command (``tied``).
"""

import os
import signal
import sys

#: ``gymlab serve`` passes each server process its config as JSON in this variable.
CONFIG_ENV = "GYMLAB_SERVER_CONFIG"
#: The pid of the process that started this one, which this one must not outlive.
PARENT_ENV = "GYMLAB_PARENT_PID"


def die_with_parent(parent: int, sig: int = signal.SIGTERM) -> None:
    """Have the kernel send ``sig`` to this process when ``parent`` (its parent) exits, and send it now
    if ``parent`` is already gone. Linux's ``PR_SET_PDEATHSIG`` (elsewhere only the check now); call it
    in the child, first thing. SIGTERM lets a server stop its own children; SIGKILL cannot be ignored."""
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
