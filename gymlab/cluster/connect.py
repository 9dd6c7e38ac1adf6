"""Ray, imported when first used: start a local cluster or join one (``address="auto"`` or an address)."""

from __future__ import annotations

from typing import Any

from gymlab.errors import ConfigError


def require_ray():
    """The ``ray`` module, or a ``ConfigError`` saying how to install it."""
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "Ray is not installed: pip install 'gymlab[ray]' (plain ray is enough; no dashboard needed)"
        ) from None
    return ray


def connect(address: str | None = None, runtime_env: dict[str, Any] | None = None, **init_options: Any):
    """The ``ray`` module, connected: the running connection if there is one, else ``ray.init``.

    ``address=None`` starts a local cluster (no dashboard); ``"auto"`` joins the cluster this host
    belongs to; ``"HOST:PORT"`` (or ``ray://...``) joins that one. ``runtime_env`` is the job's
    (Ray uploads a local ``working_dir`` only at this level); ``init_options`` go to ``ray.init``.
    """
    ray = require_ray()
    if ray.is_initialized():
        return ray
    options = {"include_dashboard": False} if address is None else {}
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
