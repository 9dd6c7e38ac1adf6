"""How a server process gets its config: ``CONFIG_ENV`` names a private JSON file (mode 0600) holding it.

A config never travels in the environment itself: Linux caps one variable at 128 KiB (a bigger config
field kills the exec with "Argument list too long"), and ``/proc/PID/environ`` shows it to the user's
other processes. Whoever writes the file removes it (``gymlab serve``'s child once it has read it, a
launcher of several workers with its private directory).
"""

from __future__ import annotations

import json
import os
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
