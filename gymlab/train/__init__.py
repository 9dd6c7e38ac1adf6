"""Training on gymlab environments (the ``train`` extra: torch, transformers, trl): see docs/train.md.

``environment_factory`` (a seed/verify server with tools, one episode per rollout), ``verify_reward``
(single-turn tasks), ``gymnasium_rollout_func`` (a Gymnasium server), ``GRPOTrainer`` (TRL's, masked
episodes out of the loss), ``TrainingRun`` (the rollouts as records, live), ``trl_rows``; ``tiny_chat_model``
and ``fit_chats`` (a tiny model built here, taught a shape in a few supervised steps)."""

from __future__ import annotations

from gymlab._lazy import lazy_names

_NAMES = {
    "Environments": "gymlab.train.environments",
    "GRPOTrainer": "gymlab.train.trainer",
    "TrainingRun": "gymlab.train.records",
    "environment_factory": "gymlab.train.environments",
    "fit_chats": "gymlab.train.tiny",
    "gymnasium_rollout_func": "gymlab.train.gymnasium",
    "trl_rows": "gymlab.train.environments",
    "verify_reward": "gymlab.train.rewards",
    "tiny_chat_model": "gymlab.train.tiny",
}

__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_names(__name__, _NAMES, globals())
