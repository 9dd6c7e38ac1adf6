"""Collection: dataset rows in, rollout records out, in resumable JSONL files (docs/collection.md)."""

from __future__ import annotations

from gymlab.collection.config import Config, load_config
from gymlab.collection.merge import amerge, merge
from gymlab.collection.runner import CollectResult, acollect, collect
from gymlab.collection.serving import Target
from gymlab.run.pool import HttpReplica, Replica, ReplicaPool

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
