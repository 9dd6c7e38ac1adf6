"""gymlab's rollout_func for TRL over a Gymnasium server: observations as user turns, the env's rewards and end."""

from __future__ import annotations

from datasets import Dataset

from gymlab import GymnasiumServer
from gymlab.train import GRPOTrainer, gymnasium_rollout_func, tiny_chat_model, trl_rows

from .conftest import grpo_config


class TwoTurns(GymnasiumServer):
    """Two turns: each pays 1 for an answer holding a digit; the first answers "again"; ``broken`` rows fail."""

    async def reset(self, metadata, session_id=None):
        if metadata.get("broken"):
            raise RuntimeError("the environment's backend is down")
        self.session_state[session_id] = {"turns": 0}
        return "Say a number.", {}

    async def step(self, action, metadata, session_id=None):
        game = self.session_state[session_id]
        game["turns"] += 1
        reward = float(any(c.isdigit() for c in action.output_text))
        done = game["turns"] >= 2
        return (None if done else "Again."), reward, done, False, {}


def test_rollout_func_plays_gymnasium_episodes(lab, tmp_path):
    model, tokenizer = tiny_chat_model(seed=0)
    env = lab.serve(TwoTurns, name="two_turns")
    played_out = []
    rollout = gymnasium_rollout_func(lab, env, max_turn_tokens=8)
    rows = [
        {"responses_create_params": {"input": "Play."}},
        {"responses_create_params": {"input": "Play."}, "broken": True},
    ]
    args = grpo_config(
        tmp_path,
        learning_rate=1e-3,
        max_steps=1,
        per_device_train_batch_size=8,
        num_generations=4,
        max_completion_length=40,
    )

    def spied(prompts, trainer):
        played_out.append(rollout(prompts, trainer))
        return played_out[-1]

    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=rollout.reward,
        rollout_func=spied,
        args=args,
        train_dataset=Dataset.from_list(trl_rows(rows)),
    )
    trainer.train()
    records = list(rollout.run.rollouts)
    assert len(records) == 8
    played = [r for r in records if not r.mask_sample]
    broken = [r for r in records if r.mask_sample]
    assert len(played) == len(broken) == 4
    assert all(r.failure_stage == "agent" and r.failure_kind for r in broken)
    for record in played:  # the env's own per-step rewards, summed; its observation was the second user turn
        assert len(record.steps) == 2 and record.terminated
        assert record.reward == sum(s.reward for s in record.steps)
        assert record.steps[0].observation == "Again."
    (out,) = played_out
    for mask, ids, reward in zip(out["env_mask"], out["completion_ids"], out["gymlab_reward"]):
        assert len(mask) == len(ids) <= 40
        if reward is not None:  # the model's two turns (1) around the observation's user turn (0)
            assert mask[0] == 1 and 0 in mask and mask[-1] == 1
    (logged,) = [e for e in trainer.state.log_history if "reward" in e]
    assert logged["gymlab/masked"] == 4
    assert abs(logged["reward"] - sum(r.reward for r in played) / 4) < 1e-6
    assert len(env.server.session_state) == 0
