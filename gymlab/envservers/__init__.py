"""Environment servers: they take a task, run it against a resources server and an agent, return a rollout.

Built-ins by the names configs use (``environment_servers: {single_agent_turn: ...}``), imported
only when asked for.
"""

from __future__ import annotations

import importlib

from gymlab.errors import ConfigError

ENVIRONMENT_SERVERS = {
    "single_agent_turn": "gymlab.envservers.single_agent_turn:SingleAgentTurn",
}


def environment_server_class(name: str):
    """The built-in environment server class called ``name`` in configs."""
    try:
        module, attr = ENVIRONMENT_SERVERS[name].split(":")
    except KeyError:
        known = ", ".join(sorted(ENVIRONMENT_SERVERS))
        raise ConfigError(f"unknown environment server {name!r}; built-in environment servers: {known}") from None
    return getattr(importlib.import_module(module), attr)
