"""Export rollouts for training: gymlab's JSONL rows and the TRL and verl trainer formats (docs/export.md)."""

from gymlab.export.dataset import FORMATS, ExportResult, export_dataset, read_dataset, to_hf
from gymlab.export.filters import Pairing, as_records, by_task, group_key, preference_pairs, select
from gymlab.export.rows import ROLLOUT_KEYS, export_rl, export_rollouts, export_sft, rl_row, rollout_row, sft_row
from gymlab.models.chat_convert import CHAT_ROLES, chat_messages, chat_tools, prompt_items

__all__ = [
    "CHAT_ROLES",
    "FORMATS",
    "ROLLOUT_KEYS",
    "ExportResult",
    "Pairing",
    "as_records",
    "by_task",
    "chat_messages",
    "chat_tools",
    "export_dataset",
    "export_rl",
    "export_rollouts",
    "export_sft",
    "group_key",
    "preference_pairs",
    "prompt_items",
    "read_dataset",
    "rl_row",
    "rollout_row",
    "select",
    "sft_row",
    "to_hf",
]
