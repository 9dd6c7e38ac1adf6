"""Masked episodes in training: a verify that fails is a masked record, never a 0, left out of the loss
(its completion mask zeroed) and counted in TRL's log."""

from __future__ import annotations

import pytest
from datasets import Dataset
from fastapi import HTTPException

from gymlab.protocol.resources import BaseVerifyRequest, BaseVerifyResponse
from gymlab.train import GRPOTrainer, TrainingRun, tiny_chat_model, trl_rows, verify_reward
from gymlab.train.toy import SayDigitServer, toy_rows

from .conftest import grpo_config


class FlakyVerify(BaseVerifyRequest):
    flaky: bool = False


class HalfBrokenServer(SayDigitServer):
    """The toy, whose grader fails (a 500) for every row marked ``flaky``: half the episodes."""

    async def verify(self, body: FlakyVerify) -> BaseVerifyResponse:
        if body.flaky:
            raise RuntimeError("the grader's backend is down")
        return await super().verify(body)


class Crashing503(SayDigitServer):
    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        raise HTTPException(503, "grader unavailable")


def _rows():
    rows = toy_rows(2)
    rows[1]["flaky"] = True
    return rows


def test_half_masked_episodes_leave_the_loss_and_are_counted(lab, tmp_path):
    model, tokenizer = tiny_chat_model(seed=1)
    env = lab.serve(HalfBrokenServer, name="half_broken")
    run = TrainingRun(tmp_path / "run.jsonl")
    args = grpo_config(
        tmp_path,
        learning_rate=1e-3,
        max_steps=1,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=6,
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=verify_reward(lab, env, run=run),
        args=args,
        train_dataset=Dataset.from_list(trl_rows(_rows())),
    )
    outputs = []
    score = trainer._generate_and_score_completions

    def kept(inputs):
        outputs.append(score(inputs))
        return outputs[-1]

    trainer._generate_and_score_completions = kept
    trainer.train()

    records = list(run.rollouts)
    masked = [r.mask_sample for r in records]
    assert sum(masked) == 4 and run.masked == 4
    assert [bool(getattr(r, "flaky", False)) for r in records] == masked  # the flaky row's episodes, each
    for record in records:
        if record.mask_sample:
            assert record.failure_kind == "verifier_error" and record.failure_stage == "verification"
    # counted in TRL's log
    logged = [e for e in trainer.state.log_history if "gymlab/masked" in e]
    assert logged and logged[0]["gymlab/masked"] == 4 and logged[0]["gymlab/masked_fraction"] == 0.5
    # excluded from the loss: no token of a masked completion counts, the normaliser counts the others only
    (out,) = outputs
    gone = out["completion_mask"][masked]
    assert gone.sum() == 0
    assert out["advantages"][masked].abs().sum() == 0
    mask = out["completion_mask"] * out.get("tool_mask", 1)
    assert out["num_items_in_batch"] == mask.sum() > 0
    # the logged mean reward covers the unmasked episodes only (never a 0 for a masked one)
    unmasked = [r.reward for r in records if not r.mask_sample]
    assert logged[0]["reward"] == pytest.approx(sum(unmasked) / len(unmasked))


def test_a_503_verify_is_masked_not_zero(lab):
    env = lab.serve(Crashing503, name="crashing")
    run = TrainingRun()
    verify = verify_reward(lab, env, run=run)
    rewards = verify(completions=["4", "no"], gymlab_row=[r["gymlab_row"] for r in trl_rows(toy_rows(2))])
    assert rewards == [None, None]
    assert [r.failure_kind for r in run.rollouts] == ["verifier_error"] * 2
    assert env.server.episode_sessions.counts()["open"] == 0


def test_rows_without_the_gymlab_column_are_refused_with_the_fix(lab):
    env = lab.serve(SayDigitServer, name="toy")
    verify = verify_reward(lab, env)
    with pytest.raises(KeyError, match="trl_rows"):
        verify(completions=["4"], prompt=["Say a number."])
