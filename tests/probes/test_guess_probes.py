"""The guessing probes and the tool leak, each against a server written to have its shortcut and a clean
one it must not flag: a short constant in the format the prompt asks for, a number of the prompt alone,
the other rows' most common answer, a tool that leaks the answer in prose after more than six calls."""

from __future__ import annotations

import random
import re
import time

import pytest

from gymlab import BaseVerifyRequest, BaseVerifyResponse, GymnasiumServer, SimpleResourcesServer
from gymlab.errors import ConfigError
from gymlab.probes import probe
from gymlab.probes.candidates import (
    AnswerCounts,
    RowIndex,
    in_answer_format,
    most_common_answer,
    prompt_number,
    spelled,
)
from gymlab.probes.policies import (
    LEAKED,
    LONG_ANSWER_CHARS,
    VARIANT_KEY,
    leaked,
    majority_answer,
    short_constant,
    tool_leak,
)
from gymlab.protocol import ResponseCreateParams

ANSWER = re.compile(r"<answer>(.*?)</answer>|\\boxed\{(.*?)\}", re.S)


class AnswerVerify(BaseVerifyRequest):
    answer: str


class ExactAnswer(SimpleResourcesServer):
    """Pays the answer in tags (or boxed) when it is the row's answer, exactly: a fair grader whose
    rows may still share an answer."""

    async def verify(self, body: AnswerVerify) -> BaseVerifyResponse:
        found = ANSWER.findall(body.response.output_text)
        given = "".join(found[-1]).strip() if found else body.response.output_text.strip()
        return BaseVerifyResponse(**body.model_dump(), reward=float(given == body.answer))


def rows(prompts_answers) -> list[dict]:
    return [{"responses_create_params": {"input": p}, "answer": a} for p, a in prompts_answers]


TAGS = " Answer Yes or No inside <answer></answer> tags."
EVEN = rows([(f"Is {n} even?{TAGS}", "Yes" if n % 2 == 0 else "No") for n in (4, 8, 10, 7, 12)])
BOXED = " Put the answer in \\boxed{}."
REMAINDERS = rows([(f"What is {n} mod 5?{BOXED}", str(n % 5)) for n in (10, 15, 20, 23)])
SQUARES = rows([(f"What is {n} squared?", str(n * n)) for n in (4, 7, 12, -3)])


def test_a_short_constant_in_the_prompts_format_flags_a_task_whose_answers_are_mostly_one(lab):
    env = lab.serve(ExactAnswer)
    report = probe(lab, env, EVEN, probes=["short_constant", "empty_answer"])
    assert report.flagged == ["short_constant:yes"], report  # 4 of 5 numbers are even
    assert report.cell("short_constant:yes").mean_reward == 0.8
    assert report.episodes("short_constant:yes", 0)[0].response.output_text == "<answer>Yes</answer>"  # as asked
    assert report.cell("short_constant:no").by_chance and not report.cell("short_constant:no").above
    boxed = probe(lab, env, REMAINDERS, probes=["short_constant"])
    assert boxed.flagged == ["short_constant:0"] and boxed.episodes("short_constant:0", 1)[0].response.output_text == (
        "\\boxed{0}"
    )
    assert "a short constant answer" in boxed.shortcuts() and "short_constant:0 *" in boxed.text()


def test_a_constant_that_is_one_tasks_own_answer_is_chance_not_a_flag(lab):
    report = probe(lab, lab.serve(ExactAnswer), SQUARES, probes=["short_constant", "prompt_number_alone"])
    assert report.flagged == [] and report.hits == [], report
    cell = report.cell("short_constant:9")  # -3 squared is 9: that task's right answer
    assert cell.mean_reward == 0.25 and cell.by_chance and not cell.above
    frame = report.frame.set_index(["probe", "task"])
    assert frame.loc[("short_constant:9", 3), "mean_reward"] == 1.0 and frame.loc[("short_constant:9", 3), "by_chance"]


LARGER = rows([(f"Which is larger, {a} or {b}? Answer with the number.", str(max(a, b))) for a, b in
               [(9, 2), (31, 7), (5, 4), (3, 80)]])  # fmt: skip


def test_a_number_of_the_prompt_alone_flags_a_task_whose_answer_the_question_states(lab):
    env = lab.serve(ExactAnswer)
    report = probe(lab, env, LARGER, probes=["prompt_number_alone", "short_constant"])
    assert report.flagged == ["prompt_number_alone:1"], report  # the larger comes first 3 times in 4
    assert report.cell("prompt_number_alone:1").mean_reward == 0.75
    assert [report.episodes(f"prompt_number_alone:{p}", 3)[0].response.output_text for p in ("1", "2", "5")] == [
        "3",
        "80",
        "80",  # past the last number: the last
    ]
    clean = probe(lab, env, SQUARES, probes=["prompt_number_alone"])
    assert clean.flagged == [] and clean.hits == [], clean


CAPITALS = rows([(f"What is the capital of {c}?", a) for c, a in
                 [("France", "Paris"), ("the French Republic", "Paris"), ("Italy", "Rome"), ("Gaul", "Paris")]])  # fmt: skip
DISTINCT = rows(
    [(f"What is the capital of {c}?", a) for c, a in [("France", "Paris"), ("Italy", "Rome"), ("Peru", "Lima")]]
)


def test_the_other_rows_most_common_answer_flags_a_skewed_dataset_never_its_own(lab):
    env = lab.serve(ExactAnswer)
    report = probe(lab, env, CAPITALS, probes=["majority_answer", "short_answer_spray"])
    assert "majority_answer" in report.flagged and report.cell("majority_answer").mean_reward == 0.75, report
    assert report.episodes("majority_answer", 2)[0].response.output_text == "Paris"  # Rome's row: the others'
    assert report.cell("majority_answer", 2).mean_reward == 0.0
    clean = probe(lab, env, DISTINCT, probes=["majority_answer"])
    assert clean.flagged == [] and clean.cell("majority_answer").mean_reward == 0.0, clean


HINT_TOOL = {
    "type": "function",
    "name": "hint",
    "description": "A hint about the word.",
    "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
    "strict": True,
}
WORD_ROWS = [
    {"responses_create_params": {"input": "Guess my fruit. Answer with the word.", "tools": [HINT_TOOL]}, "word": w}
    for w in ("blueberry", "pineapple")
]


class ProseHint(GymnasiumServer):
    """An exact-match reward and a hint that shows one more letter per call, in prose: nine calls leak
    the whole word ("The word starts with 'blueberry'.")."""

    shown_at_most: int = 100  # the fix: 1

    async def reset(self, metadata, session_id=None):
        self.session_state[session_id] = 0
        return None, {}

    async def step(self, action, metadata, session_id=None):
        calls = [i for i in action.output if i.type == "function_call"]
        if calls:
            self.session_state[session_id] += 1
            shown = metadata["word"][: min(self.session_state[session_id], self.shown_at_most)]
            outputs = [self.tool_output(c, f"The word starts with '{shown}'.") for c in calls]
            return None, 0.0, False, False, {"tool_outputs": outputs}
        return None, float(action.output_text.strip() == metadata["word"]), True, False, {}


class OneLetter(ProseHint):
    shown_at_most: int = 1


def test_the_tool_leak_reads_a_word_quoted_in_prose_after_more_than_six_calls(lab):
    report = probe(lab, lab.serve(ProseHint), WORD_ROWS, probes=["tool_leak"])
    assert report.flagged == ["tool_leak:first", "tool_leak:last"], report  # the whole sentence pays nothing
    (episode,) = report.episodes("tool_leak:first", 0)
    assert episode.response.output_text == "blueberry" and episode.terminated and not episode.truncated
    assert len(episode.steps) == 10  # gymnasium_agent's 10 steps: 9 calls, then the answer on the last
    short = probe(lab, lab.serve(ProseHint), WORD_ROWS, probes=["tool_leak"], max_steps=6)
    (cut,) = short.episodes("tool_leak:first", 0)
    assert cut.response.output_text == "blueb" and len(cut.steps) == 6 and cut.terminated  # answered in time
    clean = probe(lab, lab.serve(OneLetter), WORD_ROWS, probes=["tool_leak"])
    assert clean.flagged == [] and clean.hits == [], clean


def test_a_malformed_row_is_named_as_without_variants(lab):
    env = lab.serve(ExactAnswer)
    bad = [{"responses_create_params": {"input": "Is 2 even?", "metadata": "not a mapping"}, "answer": "Yes"}]
    for probes in (["short_constant"], ["refusal"]):
        with pytest.raises(ConfigError, match="metadata"):
            probe(lab, env, bad, probes=probes)


def test_the_most_common_answer_but_a_tasks_own_matches_counting_the_others_and_scales():
    """Built once per probe's rows, it answers as counting every other row would, ties included (the
    first seen among the others), and 20,000 rows cost each request its own rows, not all of them."""
    rng = random.Random(5)
    for _ in range(200):
        rows = [{"p": f"q{rng.randrange(6)}", "answer": rng.choice("aabbc")} for _ in range(rng.randrange(1, 12))]
        rows += rows[:1]  # a row passed twice
        counts = AnswerCounts(rows)
        for own in ([r for r in rows if r["p"] == p] for p in {r["p"] for r in rows}):
            others = [r for r in rows if all(r is not o for o in own)]
            assert counts.most_common_but(own) == most_common_answer(others), (rows, own)
    many = [{"responses_create_params": {"input": f"task {i}"}, "answer": str(i % 997)} for i in range(20_000)]
    index = RowIndex(many)
    start = time.perf_counter()
    answers = [majority_answer(ResponseCreateParams(input=f"task {i}"), index) for i in range(0, 20_000, 100)]
    assert time.perf_counter() - start < 10  # under load; about 0.3 s idle (counting per request: minutes)
    assert answers[0] == "1" and answers[1] == "0"  # task 0 holds "0": the others' first most common is "1"


def test_hostile_inputs_stay_bounded_and_fast():
    start = time.perf_counter()
    quotes = " ".join(f"'w{i}'" for i in range(200_000))  # 1.4 MB of quoted words
    found = leaked(quotes)
    assert len(found) == LEAKED and found[0] == "w0"
    assert leaked('{"a": {"b": {"c": {"d": "too deep"}}}, "n": 7}') == ["7"]  # nested past depth 3: left out
    assert leaked("") == [] and leaked("null") == ["null"]
    numbers = " ".join(str(i) for i in range(100_000))
    assert prompt_number(numbers, "last") == "99999" and prompt_number("no numbers", "1") == ""
    huge = [{"answer": "x" * 5_000}] * 3 + [{"answer": "short"}]
    assert most_common_answer(huge) == "short"  # a long answer is no short guess
    assert most_common_answer([{"answer": [1, 2]}, {"answer": [1, 2]}, {"answer": None, "k": "v"}]) == "[1, 2]"
    assert spelled("A", "a cat") == "A" and spelled("true", "Say True or False") == "True"
    assert in_answer_format("plain", "7") == "7"
    foreign = ResponseCreateParams(input="Is it?", metadata={VARIANT_KEY: "DROP TABLE"})
    assert short_constant(foreign) == "0"  # an unknown variant: the first
    spam = ResponseCreateParams(
        input=[
            {"role": "user", "content": "go"},
            {"type": "function_call", "name": "hint", "arguments": "{}", "call_id": "c0"},
            {"type": "function_call_output", "call_id": "c0", "output": "'" + "y" * 2_000_000 + "'"},
            {"type": "function_call", "name": "hint", "arguments": "{}", "call_id": "c1"},
            {"type": "function_call_output", "call_id": "c1", "output": "'" + "y" * 2_000_000 + "'"},
        ],
        tools=[HINT_TOOL],
        metadata={VARIANT_KEY: "last"},
    )
    assert len(tool_leak(spam)) == LONG_ANSWER_CHARS  # a 2 MB repeated output: answered, clipped
    assert time.perf_counter() - start < 10  # under load; well under a second idle
