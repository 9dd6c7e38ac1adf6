"""Reverify: stored rollouts graded again by an edited verify, over real HTTP, with no model calls."""

import math
import re

import pytest
from fastapi import Request

from gymlab import BaseVerifyRequest, BaseVerifyResponse, export_rollouts, reverify


class CountingPolicy:
    """Wraps a rule-based policy and counts the requests the model server answered."""

    def __init__(self, policy):
        self.policy, self.calls = policy, 0

    def __call__(self, request):
        self.calls += 1
        return self.policy(request)


def _number(request) -> int:
    text = " ".join(i.text for i in request.input_items() if i.type == "message" and i.role == "user")
    return int(re.findall(r"-?\d+", text)[-1])


def test_edited_verify_changes_rewards_without_model_calls(lab, calculator, rows, tmp_path):
    def guess_odd(request):
        """Answers odd numbers from memory (no tool call), the rest as the example policy does."""
        n = _number(request)
        if n % 2 and not any(i.type == "function_call_output" for i in request.input_items()):
            return f"The answer is {n * n}."
        return calculator.policy(request)

    policy = CountingPolicy(guess_odd)
    env = lab.serve(calculator.CalculatorServer)
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(policy))
    data = rows("calculator")
    rollouts = lab.run_many(agent, data)
    numbers = [int(re.findall(r"-?\d+", r["responses_create_params"]["input"][-1]["content"])[0]) for r in data]
    assert [r.reward for r in rollouts] == [float(n % 2 == 0) for n in numbers]
    calls_after_collection = policy.calls

    class AnswerChecked(calculator.CalculatorServer):
        """Edited reward: 1.0 when the final answer states the right square, tool or not."""

        async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
            n = _number(body.responses_create_params)
            right = str(n * n) in body.response.output_text
            return BaseVerifyResponse(**body.model_dump(), reward=float(right))

    frame = reverify(AnswerChecked, rollouts)
    assert list(frame.old_reward) == [float(n % 2 == 0) for n in numbers]
    assert list(frame.new_reward) == [1.0] * len(numbers)
    assert list(frame.changed) == [bool(n % 2) for n in numbers]
    assert list(frame.task) == list(range(len(numbers)))
    assert frame.error.isna().all() and frame.replay_matches.all()
    # the original verify, from a file, gives back the stored rewards
    same = reverify(calculator.CalculatorServer, str(export_rollouts(rollouts, tmp_path / "r.jsonl")))
    assert not same.changed.any()
    assert policy.calls == calls_after_collection  # the model server was asked nothing
    assert not any(h.name == "answer_checked" for h in lab.servers.values())


def test_stateful_environment_is_seeded_and_replayed(lab, counter, rows):
    def stop_short(request):
        """Stops one short of the target when the target is odd."""
        text = " ".join(i.text for i in request.input_items() if i.type == "message" and i.role == "user")
        start, target = (int(n) for n in re.findall(r"-?\d+", text)[:2])
        outputs = [i for i in request.input_items() if i.type == "function_call_output"]
        count = int(re.findall(r"-?\d+", outputs[-1].output)[0]) if outputs else start
        if target % 2 and count >= target - 1 and target > start:
            return f"The counter reads {count}."
        return counter.policy(request)

    policy = CountingPolicy(stop_short)
    env = lab.serve(counter.CounterServer)
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(policy))
    data = rows("counter")
    rollouts = lab.run_many(agent, data)
    calls = policy.calls
    old = [r.reward for r in rollouts]
    assert 0.0 in old and 1.0 in old

    class PartialCredit(counter.CounterServer):
        """Edited reward: the share of the way from the start to the target."""

        async def verify(self, request: Request, body: counter.CounterVerifyRequest) -> counter.CounterVerifyResponse:
            answer = await super().verify(request, body)
            start = int(re.findall(r"-?\d+", body.responses_create_params.input_items()[0].text)[0])
            span = body.target - start
            share = 1.0 if span <= 0 else (answer.final_count - start) / span
            return answer.model_copy(update={"reward": share})

    # a record keeps its row's own fields (initial_count too, though the verify does not declare it),
    # so graded from the records alone the counter is seeded as in the run and every replay matches
    from_records = reverify(PartialCredit, rollouts)
    assert all(r.model_extra["initial_count"] == row["initial_count"] for r, row in zip(rollouts, data))
    assert from_records.replay_matches.all()
    frame = reverify(PartialCredit, rollouts, rows=data)
    expected = []
    for r, row in zip(rollouts, data):
        start, target = row["initial_count"], row["target"]
        final = start + len(r.steps) - 1  # one increment a step, then the final message
        expected.append(1.0 if target <= start else (final - start) / (target - start))
    assert frame.error.isna().all(), list(frame.error)
    assert list(frame.new_reward) == pytest.approx(expected)
    assert any(0 < x < 1 for x in frame.new_reward)
    assert frame.replay_matches.all() and not frame.new_mask_sample.any()
    # without the replay the counter is graded as seeded, which shows the replay is what rebuilt the state
    unreplayed = reverify(PartialCredit, rollouts, rows=data, replay_tools=False)
    moved = [row["target"] > row["initial_count"] for row in data]
    assert [x for x, m in zip(unreplayed.new_reward, moved) if m] == pytest.approx([0.0] * sum(moved))
    assert policy.calls == calls
    assert env.server.session_state == {}


def test_a_verify_that_fails_is_reported_per_episode(lab, calculator, rows):
    env = lab.serve(calculator.CalculatorServer)
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(calculator.policy))
    rollouts = lab.run_many(agent, rows("calculator")[:2])

    class Broken(calculator.CalculatorServer):
        async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
            raise RuntimeError("the judge is down")

    frame = reverify(Broken, rollouts)
    assert frame.new_reward.isna().all() and frame.changed.all()
    assert all("POST /verify failed with HTTP 500" in e and "the judge is down" in e for e in frame.error)
    assert math.isnan(frame.delta[0])


def test_a_gymnasium_environment_is_refused_up_front(rows, lab, calculator):
    from gymlab.examples import load_environment

    env = lab.serve(calculator.CalculatorServer)
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(calculator.policy))
    rollouts = lab.run_many(agent, rows("calculator")[:1])
    with pytest.raises(TypeError, match="CalculatorEnv is not one.*rewards come from /step"):
        reverify(load_environment("calculator_gym").CalculatorEnv, rollouts)
