"""reasoning-gym through gymlab: a Lab run's rewards equal the dataset's own score_answer on the same answers."""

from __future__ import annotations

import functools
import json

import httpx
import pytest

pytest.importorskip("reasoning_gym")

import reasoning_gym  # noqa: E402
from reasoning_gym.utils import extract_answer  # noqa: E402

from gymlab import envs  # noqa: E402

#: (name, config): arc_agi's grids are tuples (a JSON copy of its entry scores 0.05 for the right
#: grid), graph_color's metadata has integer keys, composite mixes two datasets.
DATASETS = [
    ("chain_sum", {}),
    ("word_sorting", {}),
    ("graph_color", {}),
    ("arc_agi", {}),
    ("knights_knaves", {}),
    (
        "composite",
        {
            "datasets": [
                {"name": "spell_backward", "weight": 1, "config": {}},
                {"name": "basic_arithmetic", "weight": 2, "config": {}},
            ]
        },
    ),
]


def answers_by_question(rows):
    return {row["question"]: row["answer"] for row in rows}


def last_user_text(request) -> str:
    return [i.text for i in request.input_items() if i.type == "message" and i.role == "user"][-1]


def scripted(rows, kind: str):
    """A policy answering every question of ``rows`` right, wrong, or with junk."""
    truth = answers_by_question(rows)

    def policy(request):
        answer = truth[last_user_text(request)]
        text = answer if isinstance(answer, str) else json.dumps(answer)
        if kind == "right":
            return f"Let me think. <answer>{text}</answer>"
        if kind == "wrong":
            return f"<answer>{text[::-1]}0</answer>"
        return "I would rather not say."  # junk: no answer tags

    return policy


@functools.cache
def reference_dataset(name: str, config_json: str):
    """The dataset as reasoning-gym alone builds it."""
    kwargs = {"size": 4, "seed": 11, **json.loads(config_json)}
    if name == "composite":
        from reasoning_gym.composite import DatasetSpec

        kwargs["datasets"] = [DatasetSpec(**d) for d in kwargs["datasets"]]
    return reasoning_gym.create_dataset(name, **kwargs)


def reference_reward(name, config, index, text) -> float:
    """score_answer of the dataset built by reasoning-gym alone, on the same final text."""
    dataset = reference_dataset(name, json.dumps(config))
    return float(dataset.score_answer(extract_answer(text), dataset[index]))


@pytest.mark.parametrize("name,config", DATASETS, ids=[n for n, _ in DATASETS])
def test_rewards_equal_score_answer(lab, name, config):
    server, rows = envs.reasoning_gym(name, size=4, seed=11, **config)
    env = lab.serve(server)
    for kind in ("right", "wrong", "junk"):
        model = lab.serve_model(scripted(rows, kind), name=f"{kind}-model")
        agent = lab.serve_agent("simple_agent", resources=env, model=model, name=f"{kind}-agent")
        rollouts = lab.run_many(agent, rows)
        assert len(rollouts) == len(rows)
        for record in rollouts:
            assert not record.mask_sample, record.failure_reason
            ref = record.model_extra["reasoning_gym"]
            expected = reference_reward(name, config, ref["index"], record.response.output_text)
            assert record.reward == expected, (kind, ref, record.response.output_text)
        if kind == "right":  # graph_color has no oracle answer (any proper colouring scores)
            oracle = [r for r in rollouts if r.model_extra.get("answer") is not None]
            assert all(r.reward == 1.0 for r in oracle) and (oracle or name == "graph_color"), [
                r.reward for r in rollouts
            ]
        if kind == "junk":
            assert all(r.reward == 0.0 for r in rollouts)


def test_rows_are_json_and_name_their_entry():
    server, rows = envs.reasoning_gym("arc_agi", size=2, seed=3)
    assert json.loads(json.dumps(rows)) == rows
    dataset = reasoning_gym.create_dataset("arc_agi", size=2, seed=3)
    for i, row in enumerate(rows):
        assert row["reasoning_gym"] == {"dataset": "arc_agi", "config": {"size": 2, "seed": 3}, "index": i}
        assert row["question"] == dataset[i]["question"]
        assert row["responses_create_params"]["input"][-1]["content"] == dataset[i]["question"]
        assert "<answer>" in row["responses_create_params"]["input"][0]["content"]
    # the JSON copy of an arc entry does not score its own answer: why verify regenerates the entry
    entry = dataset[0]
    copy = json.loads(json.dumps(entry))
    assert dataset.score_answer(entry["answer"], entry) == 1.0
    assert dataset.score_answer(entry["answer"], copy) < 1.0


def test_bad_verify_bodies_are_4xx_naming_the_cause(lab):
    server, rows = envs.reasoning_gym("chain_sum", size=2, seed=1)
    env = lab.serve(server)
    row = rows[0]
    response = {"output": [{"type": "message", "role": "assistant", "content": "<answer>1</answer>"}]}

    def verify(**changes):
        body = {**row, "response": response, **changes}
        return httpx.post(f"{env.url}/verify", json=body, timeout=30)

    assert verify().status_code == 200
    cases = {
        "no reasoning-gym dataset 'nope'": {"reasoning_gym": {"dataset": "nope", "index": 0}},
        "chain_sum has no field 'colour'": {
            "reasoning_gym": {"dataset": "chain_sum", "config": {"colour": 1}, "index": 0}
        },
        "refused the config": {"reasoning_gym": {"dataset": "chain_sum", "config": {"min_terms": -3}, "index": 0}},
        "past chain_sum's size": {"reasoning_gym": {**row["reasoning_gym"], "index": 2}},
        "make the rows again": {"answer": "not the answer"},
        "reasoning_gym": {"reasoning_gym": None},
    }
    for cause, changes in cases.items():
        answer = verify(**changes)
        assert answer.status_code == 422, (cause, answer.text)
        assert cause in answer.text and server.name in answer.text, answer.text
    # a huge answer and a repeated verify are graded, not refused
    huge = {"output": [{"type": "message", "role": "assistant", "content": "<answer>" + "9" * 200_000 + "</answer>"}]}
    assert verify(response=huge).json()["reward"] == 0.0
    assert [verify().json()["reward"] for _ in range(3)] == [verify().json()["reward"]] * 3


def test_unknown_dataset_and_bad_config_raise_at_once():
    with pytest.raises(LookupError, match="no reasoning-gym dataset 'chain_summ'.*chain_sum"):
        envs.reasoning_gym("chain_summ")
    with pytest.raises(ValueError, match="its fields: .*min_terms"):
        envs.reasoning_gym("chain_sum", min_terms=-3)
