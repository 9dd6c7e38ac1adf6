"""Environments you did not write: reasoning-gym, TextArena, Gymnasium, OpenEnv and verifiers as gymlab
servers and rows (and gymlab's as OpenEnv's: ``as_openenv``). Each adapter returns ``(server, rows)``; its
library is an optional extra, imported only when the adapter is called (docs/envs.md)."""

from gymlab.envs.arena import TextArenaServer, textarena
from gymlab.envs.as_openenv import as_openenv, openenv_app
from gymlab.envs.gym_env import GymEnvServer, gymnasium
from gymlab.envs.open_env import OpenEnvServer, openenv
from gymlab.envs.reasoning import ReasoningGymServer, reasoning_gym
from gymlab.envs.verifiers_env import VerifiersServer, verifiers

__all__ = [
    "GymEnvServer",
    "OpenEnvServer",
    "ReasoningGymServer",
    "TextArenaServer",
    "VerifiersServer",
    "as_openenv",
    "gymnasium",
    "openenv",
    "openenv_app",
    "reasoning_gym",
    "textarena",
    "verifiers",
]
