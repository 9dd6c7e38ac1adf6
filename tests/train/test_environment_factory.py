"""gymlab's environment_factory for TRL: one episode per rollout, tools from the routes, released on every path."""

from __future__ import annotations

import gc
import threading

import pytest
from fastapi import Request
from pydantic import PrivateAttr

from gymlab.errors import EpisodeError, ServerError
from gymlab.examples import example_rows, load_environment
from gymlab.lab.reverify import reverify
from gymlab.testing.workers import wait_until
from gymlab.train import environment_factory, trl_rows

counter = load_environment("counter")


class CountingCounter(counter.CounterServer):
    """The counter environment, counting the tool calls that reach its route."""

    _hits: list = PrivateAttr(default_factory=list)

    async def increment(self, request: Request, body: counter.IncrementRequest) -> dict:
        """Add `by` to the counter and return the new count."""
        self._hits.append(body.by)
        return await super().increment(request, body)


def _open(env) -> int:
    """Episodes whose state the server holds."""
    return len(env.server.session_state)


@pytest.fixture
def served(lab):
    env = lab.serve(CountingCounter, name="counter")
    envs = environment_factory(lab, env)
    yield env, envs, trl_rows(example_rows("counter")[:2])
    envs.close()  # before the Lab stops: a test that failed midway leaves nothing open


def test_tool_methods_carry_the_routes_schema(served):
    from transformers.utils import get_json_schema

    _, envs, _ = served
    schema = get_json_schema(envs().increment)["function"]
    assert schema["name"] == "increment"
    assert schema["description"] == "Add `by` to the counter and return the new count."
    assert schema["parameters"]["properties"]["by"]["type"] == "integer"
    assert "required" not in schema["parameters"]  # `by` has a default
    assert envs.tool_names == ["increment"]


def test_normal_end_verifies_and_releases(served):
    env, envs, rows = served
    instance = envs()
    assert instance.reset(**rows[0]) is None  # the seed answers nothing: no observation to add
    assert _open(env) == 1
    assert '"count":1' in instance.increment(by=1).replace(" ", "")
    (reward,) = envs.reward(completions=[[{"role": "assistant", "content": "done"}]], environments=[instance])
    assert reward == 0.0 and _open(env) == 0 and envs.open_sessions == 0
    (record,) = envs.run.rollouts
    assert record.reward == 0.0 and not record.mask_sample and record.response.output_text == "done"
    assert [s.tool_outputs[0].output for s in record.steps[:1]] == ['{"count":1}']


def test_a_tool_error_keeps_the_episode_and_the_next_reset_releases_it(served):
    env, envs, rows = served
    instance = envs()
    instance.reset(**rows[0])
    with pytest.raises(ServerError, match="increment"):  # TRL hands the model {"error": ...}
        instance.increment(by="three")
    assert _open(env) == 1
    instance.reset(**rows[1])  # a trainer that died before the reward: the next rollout releases it
    assert _open(env) == 1 and len(env.server._hits) == 0
    envs.close()  # the end of training (or a trainer error) releases whatever is still open
    assert _open(env) == 0 and envs.open_sessions == 0
    envs.close()  # idempotent


def test_a_dropped_instance_is_released_by_garbage_collection(served):
    env, envs, rows = served
    instance = envs()
    instance.reset(**rows[0])
    instance.increment(by=2)
    del instance
    gc.collect()
    wait_until(lambda: _open(env) == 0, what="the dropped episode's session released")


def test_hostile_calls(served):
    env, envs, rows = served
    instance = envs()
    with pytest.raises(EpisodeError, match="no seeded episode"):
        instance.increment(by=1)  # before reset
    with pytest.raises(KeyError, match="trl_rows"):
        instance.reset(prompt=[{"role": "user", "content": "hi"}])  # a dataset not built by trl_rows
    instance.reset(**rows[0])
    for _ in range(50):  # a degenerate model repeating one call
        instance.increment(by=1)
    (reward,) = envs.reward(completions=["x" * 100_000], environments=[instance])
    assert reward == 0.0 and _open(env) == 0


def test_concurrent_rollouts_hold_one_session_each(served):
    env, envs, rows = served
    instances = [envs() for _ in range(8)]
    errors = []

    def rollout(i, instance):
        try:
            instance.reset(**rows[i % 2])
            for _ in range(i % 3 + 1):
                instance.increment(by=1)
        except Exception as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=rollout, args=(i, e)) for i, e in enumerate(instances)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and _open(env) == 8
    rewards = envs.reward(completions=[""] * 8, environments=instances)
    # row 0 starts at 0 and wants 3; row 1 starts at 5 and wants 6
    expected = [float((0 if i % 2 == 0 else 5) + i % 3 + 1 == (3 if i % 2 == 0 else 6)) for i in range(8)]
    assert rewards == expected and _open(env) == 0
    answers = reverify(env, list(envs.run.rollouts))
    assert list(answers["new_reward"]) == [r.reward for r in envs.run.rollouts]


def test_grpo_trainer_drives_the_routes_through_the_factory(served, tmp_path):
    """TRL's own GRPOTrainer with the factory: the tool calls its generations make reach the route,
    each reward is the server's verify of the transcript (a re-verify agrees), no session is left."""
    from datasets import Dataset

    from gymlab.train import GRPOTrainer, fit_chats, tiny_chat_model

    from .conftest import grpo_config

    env, envs, rows = served
    model, tokenizer = tiny_chat_model(seed=0)
    call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"type": "function", "function": {"name": "increment", "arguments": {"by": 1}}}],
    }
    losses = fit_chats(model, tokenizer, [row["prompt"] + [call] for row in rows], tools=[envs.cls.increment], steps=80)
    assert losses[-1] < 0.2  # a random model writes no tool call: it learns the shape of one first
    args = grpo_config(
        tmp_path,
        learning_rate=1e-3,
        max_steps=1,
        per_device_train_batch_size=4,
        num_generations=4,
        max_completion_length=64,
        max_tool_calling_iterations=2,
        temperature=0.3,
    )
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        environment_factory=envs,
        reward_funcs=envs.reward,
        args=args,
        train_dataset=Dataset.from_list(rows),
    )
    trainer.train()
    records = list(envs.run.rollouts)
    assert len(records) == 4 and not any(r.mask_sample for r in records)
    calls = [i for r in records for i in r.response.output if i.type == "function_call"]
    assert calls and len(env.server._hits) == len(calls)  # every call the model made, and only those
    logged = trainer.state.log_history[0]
    assert logged["tools/call_frequency"] > 0
    answers = reverify(env, records)
    assert list(answers["new_reward"]) == [r.reward for r in records]
    assert logged["reward"] == pytest.approx(sum(r.reward for r in records) / 4)
    assert envs.open_sessions == 0 and _open(env) == 0


class SeedFails(CountingCounter):
    """The counter whose seed fails (a 500) for a row starting at 5."""

    async def seed_session(self, request: Request, body: counter.CounterSeedRequest):
        if body.initial_count == 5:
            raise RuntimeError("the environment's backend is down")
        return await super().seed_session(request, body)


def test_a_failed_seed_is_a_masked_rollout(lab):
    env = lab.serve(SeedFails, name="seed_fails")
    envs = environment_factory(lab, env)
    rows = trl_rows(example_rows("counter")[:2])
    ok, broken = envs(), envs()
    ok.reset(**rows[0])
    assert broken.reset(**rows[1]) is None  # the rollout goes on: TRL generates, the tools refuse
    with pytest.raises(EpisodeError, match="no seeded episode"):
        broken.increment(by=1)
    rewards = envs.reward(completions=["3", "6"], environments=[ok, broken])
    assert rewards == [0.0, None]
    masked = list(envs.run.rollouts)[1]
    assert masked.mask_sample and masked.failure_stage == "seed" and masked.failure_kind == "agent_request_failed"
    assert envs.run.masked == 1 and _open(env) == 0 and not env.server._hits


def test_a_trainer_error_mid_step_leaves_sessions_that_close_releases(served, tmp_path):
    from datasets import Dataset

    from gymlab.train import GRPOTrainer, tiny_chat_model

    from .conftest import grpo_config

    env, envs, rows = served

    def broken(completions, **kwargs):
        raise RuntimeError("a reward function of the user's failed")

    model, tokenizer = tiny_chat_model(seed=0)
    args = grpo_config(tmp_path, max_steps=1, per_device_train_batch_size=4, num_generations=4, max_completion_length=4)
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        environment_factory=envs,
        reward_funcs=[broken, envs.reward],
        args=args,
        train_dataset=Dataset.from_list(rows),
    )
    with pytest.raises(RuntimeError, match="reward function of the user's failed"):
        trainer.train()
    assert envs.open_sessions == _open(env) == 4  # seeded, never verified
    envs.close()
    assert envs.open_sessions == _open(env) == 0
