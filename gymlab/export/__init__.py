"""Export rollouts for training: gymlab's JSONL rows and the TRL and verl trainer formats (docs/export.md)."""

from gymlab.export.dataset import FORMATS, export_dataset, read_dataset, to_hf
from gymlab.export.rows import (
    ROLLOUT_KEYS,
    by_task,
    export_rl,
    export_rollouts,
    export_sft,
    group_key,
    preference_pairs,
    select,
)

__all__ = [
    *("FORMATS", "export_dataset", "read_dataset", "to_hf", "by_task", "group_key", "preference_pairs", "select"),
    *("ROLLOUT_KEYS", "export_rl", "export_rollouts", "export_sft"),
]
