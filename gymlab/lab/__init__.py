"""The notebook layer: Lab and server handles, episodes, rollouts, frames, plots and widgets (names load
lazily: ``import gymlab.lab.frames`` needs only pandas, the HTTP stack comes with ``Lab``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from gymlab._lazy import lazy_names

_NAMES = {
    "AgentHandle": "gymlab.lab.handles",
    "Lab": "gymlab.lab.lab",
    "ServerHandle": "gymlab.lab.handles",
    "Episode": "gymlab.lab.episode",
    "SeedVerifyEpisode": "gymlab.lab.seed_verify",
    "GymnasiumEpisode": "gymlab.lab.gymnasium_episode",
    "Step": "gymlab.lab.gymnasium_episode",
    "Rollouts": "gymlab.lab.runs",
}

__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_names(__name__, _NAMES, globals())

if TYPE_CHECKING:  # pragma: no cover
    from gymlab.lab.episode import Episode
    from gymlab.lab.gymnasium_episode import GymnasiumEpisode, Step
    from gymlab.lab.handles import AgentHandle, ServerHandle
    from gymlab.lab.lab import Lab
    from gymlab.lab.runs import Rollouts
    from gymlab.lab.seed_verify import SeedVerifyEpisode
