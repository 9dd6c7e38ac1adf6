"""Built-in agent implementations by the names configs use."""

from __future__ import annotations

import importlib

from gymlab.errors import ConfigError

AGENTS = {
    "simple_agent": "gymlab.agents.simple_agent:SimpleAgent",
    "gymnasium_agent": "gymlab.agents.gymnasium_agent:GymnasiumAgent",
}


def agent_class(name: str):
    try:
        module, attr = AGENTS[name].split(":")
    except KeyError:
        raise ConfigError(f"unknown agent {name!r}; built-in agents: {', '.join(sorted(AGENTS))}") from None
    return getattr(importlib.import_module(module), attr)
