"""Ray, imported when first used: start a local cluster or join one (``address="auto"`` or an address).

A local cluster listens on 127.0.0.1 only; Ray fixes its node address when first imported, so that
first import (``require_ray(local=True)``) is what binds loopback (docs/cluster.md).
"""

from __future__ import annotations

import os
import sys
from typing import Any

from gymlab.errors import ConfigError

#: Ray's switch for clusters of several machines on Windows and macOS, read once at import; off
#: ("0"), the address of a node this process starts is 127.0.0.1 (Linux reads the same switch).
LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def require_ray(local: bool = False):
    """The ``ray`` module, or a ``ConfigError`` saying how to install it. ``local``: the process
    will start a local cluster, so a first import makes that cluster's address loopback."""
    first = "ray" not in sys.modules
    saved = os.environ.get(LOOPBACK_ENV)
    if local and first and saved is None:
        os.environ[LOOPBACK_ENV] = "0"
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "Ray is not installed: pip install 'gymlab[ray]' (plain ray is enough; no dashboard needed)"
        ) from None
    finally:
        if saved is None:
            os.environ.pop(LOOPBACK_ENV, None)  # read once at import; processes started later join as usual
    return ray


def connect(address: str | None = None, runtime_env: dict[str, Any] | None = None, **init_options: Any):
    """The ``ray`` module, connected: the running connection, else ``ray.init`` of a local cluster (``address=None``:
    no dashboard, loopback), this host's (``"auto"``) or ``"HOST:PORT"``'s, with the job's ``runtime_env``."""
    ray = require_ray(local=address is None)
    if ray.is_initialized():
        return ray
    options: dict[str, Any] = {"include_dashboard": False} if address is None else {}
    if runtime_env:
        options["runtime_env"] = runtime_env
    options.update(init_options)
    try:
        ray.init(address=address, **options)
    except ConnectionError as exc:
        raise ConfigError(
            f"cannot join the Ray cluster at {address!r}: {exc}; start it with `ray start --head` "
            "or give its address (HOST:PORT)"
        ) from None
    return ray


def node_count() -> int:
    """Live nodes of the connected cluster."""
    ray = require_ray()
    return sum(1 for n in ray.nodes() if n.get("Alive"))
