"""TRL's ``GRPOTrainer`` with masked episodes out of the loss altogether: their tokens out of the normaliser,
the KL term and any entropy bonus too, where TRL only zeroes their advantage (docs/train.md)."""

from __future__ import annotations

from typing import Any

import torch
from trl import GRPOTrainer as _TRLGRPOTrainer


class GRPOTrainer(_TRLGRPOTrainer):
    """``trl.GRPOTrainer``; a completion every reward function scored None (a masked gymlab episode)
    has its completion mask zeroed: it adds nothing to the loss, the KL term or the token count."""

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._unscorable = torch.isnan(rewards_per_func).all(dim=1)  # gathered over processes, like the rewards
        return rewards_per_func

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        output = super()._generate_and_score_completions(inputs)
        n = output["completion_mask"].size(0)
        start = self.accelerator.process_index * n
        keep = (~self._unscorable[start : start + n]).to(output["completion_mask"].device)
        output["completion_mask"] = output["completion_mask"] * keep.unsqueeze(1).to(output["completion_mask"].dtype)
        mask = output["completion_mask"]
        if "tool_mask" in output:
            mask = mask * output["tool_mask"]
        output["num_items_in_batch"] = self.accelerator.gather(mask.sum()).sum()
        return output
