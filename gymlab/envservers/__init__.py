"""Environment servers: they take a task, run it against a resources server and an agent, return a rollout.

Built-ins are listed by the names configs use in ``gymlab.registry``.
"""

from __future__ import annotations

from gymlab.registry import environment_server_class

__all__ = ["environment_server_class"]
