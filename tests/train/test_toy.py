"""The learnable toy: GRPO through the toy server's /verify raises a random-init tiny model's reward."""

from __future__ import annotations

import pytest
from datasets import Dataset

from gymlab import Lab, load
from gymlab.train import GRPOTrainer, TrainingRun, tiny_chat_model, trl_rows, verify_reward
from gymlab.train.toy import SayDigitServer, toy_rows

from .conftest import grpo_config


@pytest.mark.slow
def test_grpo_raises_the_toy_reward(tmp_path):
    import torch

    torch.manual_seed(0)
    model, tokenizer = tiny_chat_model(seed=0)
    steps, group = 16, 16
    with Lab() as lab:
        env = lab.serve(SayDigitServer, name="say_digit")
        run = TrainingRun(tmp_path / "train.jsonl")
        args = grpo_config(
            tmp_path,
            learning_rate=2e-2,
            max_steps=steps,
            per_device_train_batch_size=group,
            num_generations=group,
            max_completion_length=8,
        )
        trainer = GRPOTrainer(
            model=model,
            processing_class=tokenizer,
            reward_funcs=verify_reward(lab, env, run=run),
            args=args,
            train_dataset=Dataset.from_list(trl_rows(toy_rows(group))),
            callbacks=[run.callback()],
        )
        trainer.train()
    curve = [entry["reward"] for entry in trainer.state.log_history if "reward" in entry]
    assert len(curve) == steps
    first, last = sum(curve[:2]) / 2, sum(curve[-4:]) / 4
    assert 0.05 < first < 0.6, curve  # the random model earns it sometimes, not always
    assert last - first >= 0.3, curve
    # every reward TRL logged came from the server's verify: the records, by training step
    records = load(tmp_path / "train.jsonl")
    assert len(records) == steps * group and run.masked == 0
    by_step = {}
    for record in records:
        by_step.setdefault(record.train_step, []).append(record.reward)
    assert sorted(by_step) == list(range(steps))
    assert [sum(r) / len(r) for _, r in sorted(by_step.items())] == pytest.approx(curve)
