"""Built-in server implementations by the names configs use, in the one table every lookup reads (lazily)."""

from __future__ import annotations

import importlib
import inspect
from types import ModuleType

from gymlab.errors import ConfigError

#: server type -> implementation name -> "module:Class", or "module" (the one server class it defines).
BUILTINS: dict[str, dict[str, str]] = {
    "responses_api_agents": {
        "simple_agent": "gymlab.agents.simple_agent:SimpleAgent",
        "gymnasium_agent": "gymlab.agents.gymnasium_agent:GymnasiumAgent",
    },
    "responses_api_models": {
        "policy_model": "gymlab.models.policy:PolicyModel",
        "openai_model": "gymlab.models.openai",
        "hf_model": "gymlab.models.hf:HFModel",
    },
    "environment_servers": {
        "single_agent_turn": "gymlab.envservers.single_agent_turn",
    },
    "resources_servers": {
        "reasoning_gym": "gymlab.envs.reasoning:ReasoningGymServer",
        "textarena": "gymlab.envs.arena:TextArenaServer",
        "gymnasium": "gymlab.envs.gym_env:GymEnvServer",
        "openenv": "gymlab.envs.open_env:OpenEnvServer",
    },
}

_NOUNS = {
    "responses_api_agents": ("agent", "agents"),
    "environment_servers": ("environment server", "environment servers"),
    "responses_api_models": ("model", "models"),
    "resources_servers": ("resources server", "resources servers"),
}


def builtin_class(server_type: str, name: str) -> type:
    """The built-in class called ``name`` among ``server_type``; ``ConfigError`` listing the known ones."""
    known = BUILTINS.get(server_type, {})
    if name not in known:
        one, many = _NOUNS.get(server_type, (server_type, server_type))
        raise ConfigError(f"unknown {one} {name!r}; built-in {many}: {', '.join(sorted(known)) or 'none'}")
    module, _, attr = known[name].partition(":")
    imported = importlib.import_module(module)
    return getattr(imported, attr) if attr else defined_server_classes(imported)[0]


def defined_server_classes(module: ModuleType) -> list[type]:
    """The concrete ``BaseServer`` subclasses ``module`` itself defines (not the ones it imports)."""
    from gymlab.server import BaseServer

    return [
        v
        for v in vars(module).values()
        if inspect.isclass(v)
        and issubclass(v, BaseServer)
        and v.__module__ == module.__name__
        and not inspect.isabstract(v)
    ]


def agent_class(name: str) -> type:
    """The built-in agent class called ``name`` in configs (``simple_agent``, ``gymnasium_agent``)."""
    return builtin_class("responses_api_agents", name)


def environment_server_class(name: str) -> type:
    """The built-in environment server class called ``name`` in configs."""
    return builtin_class("environment_servers", name)
