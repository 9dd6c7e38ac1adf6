"""What a step and an episode look like in a notebook, and the one spelling of a hand-driven action."""

import re

import pytest

from gymlab import Lab
from gymlab.examples import example_rows, load_environment
from gymlab.lab.episode import Step
from gymlab.lab.runs import Rollouts

LEFT = "style='text-align:left;vertical-align:top;white-space:pre-wrap'"


@pytest.fixture(scope="module")
def lab():
    with Lab() as lab:
        yield lab


@pytest.fixture(scope="module")
def table(lab):
    return lab.serve(load_environment("blackjack").BlackjackEnv)


def test_a_step_shows_its_action_outputs_and_observation(lab, table):
    with lab.episode(table, example_rows("blackjack")[0]) as hand:
        hand.reset()
        step = hand.call("hit")  # the spelling of a seed/verify episode's tool call
    assert isinstance(step, Step) and step.record is hand.steps[0]
    observation, reward, terminated, truncated, info = step  # still Gymnasium's five values
    assert (reward, terminated, truncated) == (-1.0, True, False) and info["outcome"] == "bust"
    assert repr(step) == f"<Step step 0: hit({{}}) -> reward -1 terminated; observation {observation!r}>"
    page = step._repr_html_()
    assert "<b>step 0</b>: reward -1 terminated" in page
    assert f"<td {LEFT}>call</td><td {LEFT}>hit({{}})</td>" in page
    assert f"<td {LEFT}>observation</td><td {LEFT}>Your hand: " in page


def test_call_and_say_take_the_same_step_as_the_older_spellings(lab, table):
    row = example_rows("blackjack")[1]
    with lab.episode(table, row) as a, lab.episode(table, row) as b, lab.episode(table, row) as c:
        for ep in (a, b, c):
            ep.reset()
        by_call, by_tuple = a.call("stand"), b.step(("stand", {}))
        by_keywords = c.step(call="stand", arguments={})
    assert by_call[:4] == by_tuple[:4] == by_keywords[:4]  # the info differs only in the random call ids
    assert by_call.info["outcome"] == by_tuple.info["outcome"] == by_keywords.info["outcome"]
    assert [i.name for i in a.steps[0].action] == [i.name for i in b.steps[0].action] == ["stand"]
    with lab.episode(table, row) as said, lab.episode(table, row) as text:
        said.reset()
        text.reset()
        assert tuple(said.say("I stand")) == tuple(text.step("I stand"))
        assert said.steps[0].action[0].type == "message"


def test_seed_verify_only_methods_still_name_the_other_protocol(lab, table):
    with lab.episode(table, example_rows("blackjack")[0]) as hand:
        with pytest.raises(AttributeError, match=r"speaks gymnasium; verify\(\) belongs to the other protocol"):
            hand.verify()


def test_an_episode_table_is_left_aligned(lab, table):
    with lab.episode(table, example_rows("blackjack")[2]) as hand:
        hand.reset()
        hand.call("stand")
        page = hand._repr_html_()
    cells = re.findall(r"<td (style='[^']*')>", page)
    assert cells and all(style == LEFT for style in cells[0::3]) and all(style == LEFT for style in cells[1::3])
    assert "<div style='text-align:left'>" in page


def test_a_run_summary_reads_no_record_into_a_model(tmp_path):
    record = {"responses_create_params": {"input": "q"}, "response": {"output": []}, "reward": 1.0}
    odd = {**record, "steps": [{"index": 0, "action": [{"type": "function_call"}]}]}  # no name: invalid as a model
    path = tmp_path / "r.jsonl"
    Rollouts([record, odd]).save(path)
    loaded = Rollouts.load(path)
    assert "<b>Rollouts</b>: 2 episodes, 1 steps, mean reward 1.000" in loaded._repr_html_()
    with pytest.raises(Exception, match=r"r\.jsonl:2: not a rollout record: steps\.0\.action\.0"):
        _ = loaded[1]
