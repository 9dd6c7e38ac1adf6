"""TRL's ``rollout_func`` over a served Gymnasium environment: each completion one gymlab episode, the
environment's observations as user turns (masked out of the loss), its rewards and its end. docs/train.md."""

from __future__ import annotations

from typing import Any

from gymlab.train.environments import row_of
from gymlab.train.records import TrainingRun

#: What a rollout_func hands TRL per prompt (``gymlab_reward`` reaches ``reward`` as a column).
COLUMNS = ("prompt_ids", "completion_ids", "logprobs", "env_mask", "gymlab_reward")


def _generate(model: Any, tokenizer: Any, ids: list[int], budget: int, temperature: float) -> tuple[list, list]:
    """Sampled token ids (up to the end of turn) and each one's log-probability after temperature: TRL's
    importance-sampling correction wants the processed distribution (HFModel's are the raw one's)."""
    import torch

    with torch.no_grad():
        out = model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            max_new_tokens=budget,
            do_sample=True,
            temperature=temperature,
            output_scores=True,
            return_dict_in_generate=True,
            pad_token_id=tokenizer.pad_token_id,
        )
    new = out.sequences[0, len(ids) :].tolist()
    logps = [torch.log_softmax(s[0].float(), -1)[t].item() for s, t in zip(out.scores, new, strict=False)]
    if tokenizer.eos_token_id in new:  # the end of turn kept, what follows it (padding) dropped
        new = new[: new.index(tokenizer.eos_token_id) + 1]
    return new, logps[: len(new)]


def _template_ids(tokenizer: Any, messages: list[dict]) -> list[int]:
    ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    return list(getattr(ids, "input_ids", ids))


def _between_turns(tokenizer: Any, messages: list[dict], said: str, generated: str, observation: str) -> list[int]:
    """The tokens the chat template puts after the model's turn up to its next one (the observation as a
    user message): the text the template renders past what the model generated."""
    before = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False) + generated
    turns = [*messages, {"role": "assistant", "content": said}, {"role": "user", "content": observation}]
    after = tokenizer.apply_chat_template(turns, add_generation_prompt=True, tokenize=False)
    if not after.startswith(before):  # the template rewrote the turn: take what follows its own rendering
        before = tokenizer.apply_chat_template(turns[:-1], tokenize=False)
    return tokenizer(after[len(before) :], add_special_tokens=False)["input_ids"]


def gymnasium_rollout_func(
    lab: Any, env: Any, *, run: TrainingRun | None = None, max_turns: int = 8, max_turn_tokens: int | None = None
):
    """A TRL ``rollout_func`` over ``trl_rows`` of a served Gymnasium ``env``: each prompt one episode, its
    observations user turns out of the loss; ``rollout_func.reward`` is the reward function to pass."""
    run = run if run is not None else TrainingRun()

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list]:
        tokenizer = trainer.processing_class
        model = trainer.accelerator.unwrap_model(trainer.model)
        budget, step = trainer.max_completion_length, trainer.state.global_step
        results = []
        for prompt in prompts:
            row = row_of(prompt[0])
            messages = [{"role": m["role"], "content": m["content"]} for m in prompt]
            episode = lab.episode(env, row)
            ids: list[int] = []
            logps: list[float] = []
            mask: list[int] = []
            reward: float | None = None
            prompt_ids: list[int] = []
            try:
                observation, _ = episode.reset()
                if observation:
                    messages.append({"role": "user", "content": observation})
                prompt_ids = _template_ids(tokenizer, messages)
                for _ in range(max_turns):
                    turn = min(budget - len(ids), max_turn_tokens or budget)
                    new, new_logps = _generate(model, tokenizer, prompt_ids + ids, turn, trainer.temperature)
                    ids, logps, mask = ids + new, logps + new_logps, mask + [1] * len(new)
                    said = tokenizer.decode(new, skip_special_tokens=True)
                    answer = episode.say(said)
                    if episode.done or len(ids) >= budget or not answer.observation:
                        break
                    between = _between_turns(tokenizer, messages, said, tokenizer.decode(new), answer.observation)[
                        : budget - len(ids)
                    ]
                    messages += [
                        {"role": "assistant", "content": said},
                        {"role": "user", "content": answer.observation},
                    ]
                    ids, logps, mask = ids + between, logps + [0.0] * len(between), mask + [0] * len(between)
                episode.close()  # an episode cut by the budget or max_turns (a no-op when it ended)
                record = run.add(episode.rollout, step)
                reward = None if record.mask_sample else record.reward
            except Exception as exc:  # a failed reset or step: the episode's masked outcome
                reward = run.fail(episode, exc, "agent", step)
                if not episode.done:
                    episode.close()
                prompt_ids = prompt_ids or _template_ids(tokenizer, messages)
            if not ids:  # TRL needs a token: the end of turn, masked out
                ids, logps, mask = [tokenizer.eos_token_id], [0.0], [0]
            results.append((prompt_ids, ids, logps, mask, reward))
        return {key: [r[i] for r in results] for i, key in enumerate(COLUMNS)}

    def reward(completions: list[Any], gymlab_reward: list[float | None], **kwargs: Any) -> list[float | None]:
        """The episodes' own rewards (summed over steps); None for a masked one."""
        run.log(kwargs.get("log_metric"))
        return list(gymlab_reward)

    rollout_func.reward = reward
    rollout_func.run = run
    return rollout_func
