"""Environment servers: a task run against a resources server and an agent, a rollout back (built-ins by
their config names: ``gymlab.registry``)."""

from __future__ import annotations

from gymlab.registry import environment_server_class

__all__ = ["environment_server_class"]
