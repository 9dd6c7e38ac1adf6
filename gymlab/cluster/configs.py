"""A YAML config's servers as a pool of cells (``gymlab collect/serve CONFIG --ray``)."""

from __future__ import annotations

from typing import Any

from gymlab.cluster.connect import connect, node_count
from gymlab.cluster.pool import CellPool
from gymlab.cluster.recipe import from_config


def replicas_of(config, replicas: int | None) -> int:
    """``replicas`` if given, else the largest ``num_replicas`` in the config, else one cell per node."""
    if replicas is not None:
        return replicas
    declared = [s.num_replicas for s in config.servers.values() if s.num_replicas]
    return max(declared) if declared else node_count()


def config_pool(
    config,
    *,
    address: str | None = None,
    replicas: int | None = None,
    cpus_per_replica: float = 1.0,
    runtime_env: dict[str, Any] | None = None,
) -> CellPool:
    """Cells each running every server of ``config`` (models, resources servers, agents)."""
    connect(address)
    recipes = from_config(config)
    name = ", ".join(r.name for r in recipes if r.role == "agent")
    return CellPool(
        recipes,
        replicas=replicas_of(config, replicas),
        cpus_per_replica=cpus_per_replica,
        name=name,
        address=address,
        runtime_env=runtime_env,
    )
