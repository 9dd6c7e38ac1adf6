"""The example environments as shipped: no probe earns their reward, while their rule-based policies do.

Four needed a fix, each found by these probes (see each example's docstring): the calculator paid for
any call of ``square``, calculator_gym for any final answer, qa for any text holding the expected
word (then for any ten words holding it: the short answer-aware spray "Eiffel Hg 39" paid every
task), and the counter's last row asked for the value it started at.
"""

from __future__ import annotations

import pytest

from gymlab.examples import example_rows, load_environment
from gymlab.probes import BUILTIN_PROBES, probe

SERVED = {
    "calculator": "CalculatorServer",
    "counter": "CounterServer",
    "stateless": "ReverseServer",
    "qa": "QAEnv",
    "calculator_gym": "CalculatorEnv",
}


@pytest.mark.parametrize("name", sorted(SERVED))
def test_example_is_not_flagged(lab, name):
    example = load_environment(name)
    env = lab.serve(getattr(example, SERVED[name]))
    report = probe(lab, env, example_rows(name), real_policy=example.policy)
    assert list(report.rollouts) == list(BUILTIN_PROBES)
    assert report.flagged == [] and report.hits == [], report
    assert report.cell("refusal").real_reward == 1.0  # the real policy earns every reward
    assert all(not r.mask_sample for rs in report.rollouts.values() for r in rs)  # every probe was graded


def test_blackjack_is_not_flagged_though_a_blind_hand_can_win(lab):
    """Blackjack is a game of chance: drawing then standing without looking wins a dealt hand now and
    then (a marked task), but loses on average, below the real policy."""
    blackjack = load_environment("blackjack")
    env = lab.serve(blackjack.BlackjackEnv)
    report = probe(lab, env, example_rows("blackjack"), real_policy=blackjack.policy)
    assert report.flagged == [], report
    real = report.cell("refusal").real_reward
    assert all(report.cell(p).mean_reward < real for p in report.rollouts)
    tool_probes = {
        *("call_every_tool", "call_every_tool_silent", "call_every_tool_random", "call_every_tool_then_spray"),
        "tool_leak",
    }
    assert {p for p, _ in report.hits} <= tool_probes


def test_agent_embedded_guess_number_is_not_flagged(lab):
    """An agent handle is probed on copies of that agent; its own model is the real policy."""
    guess = load_environment("guess_number")
    agent = lab.serve_agent(guess.GuessNumberAgent, model=lab.serve_model(guess.policy), name="guess_number")
    report = probe(lab, agent, example_rows("guess_number"))
    assert report.flagged == [] and report.hits == [], report
    assert report.cell("answer_spray", 0).real_reward == 1.0
    assert {r.agent for r in report.episodes("answer_spray")} == {"probe-answer_spray-agent"}
