"""Export rollouts for training: gymlab's JSONL rows and the TRL and verl trainer formats (docs/export.md)."""

from gymlab.export.dataset import FORMATS, ExportResult, export_dataset, read_dataset, to_hf
from gymlab.export.rows import (
    ROLLOUT_KEYS,
    Pairing,
    as_records,
    by_task,
    export_rl,
    export_rollouts,
    export_sft,
    group_key,
    preference_pairs,
    rl_row,
    rollout_row,
    select,
    sft_row,
)

__all__ = [
    *("FORMATS", "ExportResult", "export_dataset", "read_dataset", "to_hf"),
    *("Pairing", "as_records", "by_task", "group_key", "preference_pairs", "select"),
    *("ROLLOUT_KEYS", "export_rl", "export_rollouts", "export_sft", "rl_row", "rollout_row", "sft_row"),
]
