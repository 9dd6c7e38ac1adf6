"""Training on gymlab environments with TRL (the ``train`` extra: torch, transformers, trl): docs/train.md."""

from typing import Any

from gymlab.train.environments import Environments, environment_factory, trl_rows, verify_reward
from gymlab.train.gymnasium import gymnasium_rollout_func
from gymlab.train.records import TrainingRun
from gymlab.train.tiny import fit_chats, tiny_chat_model

__all__ = [
    "Environments",
    "GRPOTrainer",
    "TrainingRun",
    "environment_factory",
    "fit_chats",
    "gymnasium_rollout_func",
    "tiny_chat_model",
    "trl_rows",
    "verify_reward",
]


def __getattr__(name: str) -> Any:
    if name == "GRPOTrainer":  # TRL's subclass: torch and TRL load only when it is asked for
        from gymlab.train.trainer import GRPOTrainer

        return GRPOTrainer
    raise AttributeError(f"module 'gymlab.train' has no attribute {name!r}")
