"""Environments you did not write: reasoning-gym, TextArena, Gymnasium, OpenEnv and verifiers as gymlab
servers and rows (and gymlab's as theirs: ``as_openenv``).

Each adapter returns ``(server, rows)``; its library is an optional extra, imported only when the
adapter is called (docs/envs.md).
"""

from __future__ import annotations

from gymlab._lazy import lazy_names

_NAMES = {
    "reasoning_gym": "gymlab.envs.reasoning",
    "ReasoningGymServer": "gymlab.envs.reasoning",
    "textarena": "gymlab.envs.arena",
    "TextArenaServer": "gymlab.envs.arena",
    "gymnasium": "gymlab.envs.gym_env",
    "GymEnvServer": "gymlab.envs.gym_env",
    "openenv": "gymlab.envs.open_env",
    "OpenEnvServer": "gymlab.envs.open_env",
    "as_openenv": "gymlab.envs.as_openenv",
    "openenv_app": "gymlab.envs.as_openenv",
    "verifiers": "gymlab.envs.verifiers_env",
    "VerifiersServer": "gymlab.envs.verifiers_env",
}

__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_names(__name__, _NAMES, globals())
