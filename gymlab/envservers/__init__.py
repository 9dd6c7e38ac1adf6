"""Environment servers: a task run against a resources server and an agent (built-ins: ``gymlab.registry``)."""

from __future__ import annotations

from gymlab.registry import environment_server_class

__all__ = ["environment_server_class"]
