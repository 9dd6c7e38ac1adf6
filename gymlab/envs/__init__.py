"""Environments you did not write: reasoning-gym, TextArena and Gymnasium as gymlab servers and rows.

``reasoning_gym(name, ...)``, ``textarena(env_id, ...)`` and ``gymnasium(env_id or env, ...)`` each
return ``(server, rows)``: serve the server with ``lab.serve(server)``, run the rows through an agent
(simple_agent for reasoning-gym, gymnasium_agent for the others). Each library is an optional extra,
imported only when its adapter is called; a missing one raises an ``ImportError`` naming the extra.
"""

from __future__ import annotations

import importlib
from typing import Any

_NAMES = {
    "reasoning_gym": "gymlab.envs.reasoning",
    "ReasoningGymServer": "gymlab.envs.reasoning",
    "textarena": "gymlab.envs.arena",
    "TextArenaServer": "gymlab.envs.arena",
    "gymnasium": "gymlab.envs.gym_env",
    "GymEnvServer": "gymlab.envs.gym_env",
}

__all__ = sorted(_NAMES)


def __getattr__(name: str) -> Any:
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'gymlab.envs' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return __all__
