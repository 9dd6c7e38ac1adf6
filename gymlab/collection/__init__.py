"""Collection: dataset rows in, rollout records out, in resumable JSONL files.

``config`` (YAML configs) and ``imports`` (what a config names) -> ``datasets`` (rows, taskset
collation) -> ``expand`` (rows x repeats -> jobs) -> ``runner`` (``collect``/``acollect``) writing
``files`` through ``gymlab.jsonl``, with ``metrics`` at the end. ``dispatch`` spreads rollouts over
a pool of replicas, ``shards`` splits the tasks over hosts, ``merge`` joins the shards again.
``records`` holds what readers of rollout files share (``Rollouts``); ``export`` and
``reverification`` sit beside it.
"""

from __future__ import annotations

from gymlab.collection.config import Config, load_config
from gymlab.collection.dispatch import HttpReplica, Replica, ReplicaPool
from gymlab.collection.merge import amerge, merge
from gymlab.collection.runner import CollectResult, Target, acollect, collect

__all__ = [
    "CollectResult",
    "Config",
    "HttpReplica",
    "Replica",
    "ReplicaPool",
    "Target",
    "acollect",
    "amerge",
    "collect",
    "load_config",
    "merge",
]
