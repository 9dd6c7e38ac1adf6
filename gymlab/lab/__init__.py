"""The notebook layer: Lab and server handles (heavier parts are imported lazily)."""

from gymlab.lab.episode import Episode, ForkDivergedError, GymnasiumEpisode, SeedVerifyEpisode, Step
from gymlab.lab.lab import AgentHandle, Lab, ServerHandle
from gymlab.lab.runs import Rollouts

__all__ = ["AgentHandle", "Episode", "ForkDivergedError", "GymnasiumEpisode", "Lab", "Rollouts",
           "SeedVerifyEpisode", "ServerHandle", "Step"]
