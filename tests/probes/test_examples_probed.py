"""The example environments as shipped: no probe earns their reward, while their rule-based policies do.

Five needed a fix, each found by these probes (see each example's docstring): the calculator paid for
any call of ``square``, calculator_gym for any final answer, qa for any text holding the expected
word (then for any ten words holding it: the short answer-aware spray "Eiffel Hg 39" paid every
task), the counter's last row asked for the value it started at, and open_qa's brevity bonus paid
any short answer while its judge passed any answer holding the reference.
"""

from __future__ import annotations

import pytest

from gymlab import Component
from gymlab.examples import example_rows, load_environment
from gymlab.probes import BUILTIN_PROBES, probe
from gymlab.probes.policies import run_names

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
    assert list(report.rollouts) == run_names(BUILTIN_PROBES)
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
        *("tool_leak:all", "tool_leak:first", "tool_leak:last"),
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


def serve_open_qa(lab, judge_policy, rubric=None):
    """open_qa with a judge model serving ``judge_policy``: the shipped rubric, or ``rubric(judge)``."""
    open_qa = load_environment("open_qa")
    judge = lab.serve_model(judge_policy, name="judge")
    if rubric is None:
        return lab.serve(open_qa.OpenQAServer, judge_model=judge.url)  # the rubric it builds itself
    return lab.serve(open_qa.OpenQAServer, rubric=rubric(judge), name="open_qa_before")


def test_open_qa_is_not_flagged(lab):
    open_qa = load_environment("open_qa")
    report = probe(lab, serve_open_qa(lab, open_qa.judge_policy), example_rows("open_qa"), real_policy=open_qa.policy)
    assert list(report.rollouts) == run_names(BUILTIN_PROBES)
    assert report.flagged == [] and report.hits == [], report
    assert all(not r.mask_sample for rs in report.rollouts.values() for r in rs)  # every probe was graded
    # the real policy: brief and right, long and right (brevity unpaid), right every other time, wrong
    real = [report.real_reward(task) for task in range(4)]
    assert real[0] == 1.0 and real[1] == 0.8 and real[2] in (0.0, 1.0) and real[3] == 0.0


def lenient_judge(request) -> str:
    """open_qa's first judge: CORRECT when the reference appears anywhere in the answer."""
    open_qa = load_environment("open_qa")
    reference, answer = open_qa.reference_and_answer(request)
    return "CORRECT" if open_qa.normal(reference) in open_qa.normal(answer) else "INCORRECT"


def test_open_qa_before_its_fix_is_flagged_naming_the_component_that_paid(lab):
    """The first open_qa: brevity paid on any answer (no gate) and a judge that accepted the reference
    anywhere. The refusal earned 0.2 from brevity alone; the sprays earned correctness."""
    open_qa = load_environment("open_qa")

    def before(judge):
        return open_qa.open_qa_rubric(judge).with_component(Component("concise", open_qa.concise, weight=0.2))

    env = serve_open_qa(lab, lenient_judge, before)
    assert repr(env.server.rubric) == "<Rubric correct=0.8 (judge), concise=0.2>"
    report = probe(lab, env, example_rows("open_qa"), real_policy=open_qa.policy)
    reasons = report.reasons()
    assert {"refusal", "verdict_injection", "short_answer_spray", "answer_aware_spray"} <= set(report.flagged)
    assert reasons["refusal"] == (
        "refusal: it earned a mean reward of 0.20 (above 0), paid by the component concise (mean value 1.00)"
        "; a component's value is before its weight, not the reward."
    )
    assert report.components("answer_aware_spray") == {"correct": 1.0, "concise": 0.0}  # every task's answer
    assert reasons["short_answer_spray"] == (  # "100 Jane Austen Rayleigh scattering" (3 references of 4)
        "short_answer_spray: it earned a mean reward of 0.80 (above 0), paid by the components concise (mean value 1.00), "
        "correct (mean value 0.75); a component's value is before its weight, not the reward."
    )


@pytest.mark.parametrize("fix", ["gate only", "judge only"])
def test_open_qa_needs_both_fixes(lab, fix):
    """The gate alone leaves the sprays paid by the lenient judge; the strict judge alone leaves a
    refusal paid by brevity."""
    open_qa = load_environment("open_qa")
    if fix == "gate only":
        env = serve_open_qa(lab, lenient_judge, open_qa.open_qa_rubric)
        left, paid = "answer_aware_spray", {"correct": 1.0, "concise": 0.0}
    else:
        ungated = Component("concise", open_qa.concise, weight=0.2)
        env = serve_open_qa(
            lab, open_qa.judge_policy, lambda judge: open_qa.open_qa_rubric(judge).with_component(ungated)
        )
        left, paid = "refusal", {"concise": 1.0, "correct": 0.0}
    probes = ["refusal", "short_answer_spray", "answer_aware_spray", "verdict_injection"]
    report = probe(lab, env, example_rows("open_qa"), probes=probes, real_policy=open_qa.policy)
    assert left in report.flagged and report.components(left) == paid, report
