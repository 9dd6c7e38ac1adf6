"""Probes that know the task: the answer-aware sprays (the row's fields, the prompt's tokens, their
permutations) and the tool leak, each against a real Lab-served environment that pays it, and its fix."""

from __future__ import annotations

import itertools
import json
import math
import re
import time

from gymlab import (
    BaseVerifyRequest,
    BaseVerifyResponse,
    Component,
    GymnasiumServer,
    Judge,
    Rubric,
    SimpleResourcesServer,
)
from gymlab.examples import example_rows, load_environment
from gymlab.probes import BUILTIN_PROBES, probe
from gymlab.probes.candidates import DECOYS, SPRAY_CHARS, RowIndex, spray, task_candidates
from gymlab.probes.policies import LONG_ANSWER_CHARS, answer_aware_spray, refusal, short_answer_spray, tool_leak
from gymlab.protocol import ResponseCreateParams

#: The environment's own dictionary: the word behind each scramble is no field of the row.
WORDS = {"tca": "cat", "ogd": "dog", "nsu": "sun", "alpne": "plane"}
UNSCRAMBLE = [
    {"responses_create_params": {"input": f"Unscramble the letters '{s}' into an English word. Answer with the word."}}
    for s in WORDS
]


def _scrambled(body) -> str:
    return re.findall(r"'([a-z]+)'", body.responses_create_params.input_items()[-1].text)[0]


class SubstringUnscramble(SimpleResourcesServer):
    """The gameable reward: ``float(word in answer)``."""

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        word = WORDS[_scrambled(body)]
        return BaseVerifyResponse(**body.model_dump(), reward=float(word in body.response.output_text))


class ExactUnscramble(SimpleResourcesServer):
    """The fix: the answer is the word."""

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        word = WORDS[_scrambled(body)]
        return BaseVerifyResponse(**body.model_dump(), reward=float(body.response.output_text.strip() == word))


def unscrambles(request):
    """The real policy: it knows the words."""
    return WORDS[re.findall(r"'([a-z]+)'", request.input_items()[-1].text)[0]]


def test_the_permutation_spray_flags_a_substring_unscramble_reward(lab):
    report = probe(lab, lab.serve(SubstringUnscramble), UNSCRAMBLE, real_policy=unscrambles)
    assert report.flagged == ["answer_aware_spray"], report  # nothing else writes the word
    assert report.cell("answer_aware_spray").mean_reward == 1.0 and report.real_reward(None) == 1.0
    (episode,) = report.episodes("answer_aware_spray", 3)
    text = episode.response.output_text
    assert {"".join(p) for p in itertools.permutations("alpne")} <= set(text.split())  # all 120 orderings
    assert text.split()[:2] == list(DECOYS) and "answer-aware spray" in report.shortcuts()
    assert report.reasons() == {"answer_aware_spray": "answer_aware_spray: it earned a mean reward of 1.00 (above 0)."}
    fixed = probe(lab, lab.serve(ExactUnscramble), UNSCRAMBLE, real_policy=unscrambles)
    assert fixed.flagged == [] and fixed.hits == [] and fixed.real_reward(None) == 1.0, fixed


def test_spray_candidates_are_bounded_and_keep_the_decoys_at_both_ends():
    prompt = "Unscramble one of these: abcdefg hijklmn opqrstu (3 of them)"
    text = spray(task_candidates(prompt, [{"word": "x", "meta": {"n": 4, "tags": ["y z"]}}]))
    assert len(text) <= SPRAY_CHARS + 40
    words = text.split()
    assert words[:2] == list(DECOYS) and words[-2:] == list(DECOYS)[::-1]
    assert {"x", "4", "5", "16", "-4", "7", "12"} <= set(words) and " y z " in text  # fields, numbers, sums
    assert words.count("x") == 1 and words.count("abcdefg") == 1  # each candidate once
    assert {"".join(p) for p in itertools.permutations("opqrstu")} <= set(words)  # the latest token's first
    assert "gfedcba" not in words and "nmlkjih" not in words  # the budget ran out in the second token
    request = ResponseCreateParams(input=[{"role": "user", "content": "Unscramble 'tca'."}])
    assert "act" in answer_aware_spray(request, UNSCRAMBLE).split()


class HintUnscramble(GymnasiumServer):
    """An exact-match reward and a ``hint`` tool that leaks one more letter of the word per call."""

    hint_letters: int = 100  # the fix: at most the first letter

    async def reset(self, metadata, session_id=None):
        self.session_state[session_id] = 0
        return None, {}

    async def step(self, action, metadata, session_id=None):
        calls = [i for i in action.output if i.type == "function_call"]
        if calls:
            outputs = []
            for call in calls:
                self.session_state[session_id] += 1
                shown = min(self.session_state[session_id], self.hint_letters)
                outputs.append(self.tool_output(call, {"hint": metadata["word"][:shown]}))
            return None, 0.0, False, False, {"tool_outputs": outputs}
        self.session_state.pop(session_id, None)
        return None, float(action.output_text.strip() == metadata["word"]), True, False, {}


class OneLetterHint(HintUnscramble):
    hint_letters: int = 1


HINT_TOOL = {
    "type": "function",
    "name": "hint",
    "description": "One more letter of the word.",
    "parameters": {"type": "object", "properties": {}, "additionalProperties": False},
    "strict": True,
}
HINT_ROWS = [
    {"responses_create_params": {"input": f"Unscramble '{s}'. Answer with the word.", "tools": [HINT_TOOL]}, "word": w}
    for s, w in WORDS.items()
]


def test_the_tool_leak_flags_a_hint_that_gives_the_word_away(lab):
    report = probe(lab, lab.serve(HintUnscramble), HINT_ROWS, real_policy=unscrambles)
    leaks = ["tool_leak:all", "tool_leak:first", "tool_leak:last"]
    assert report.flagged == leaks, report  # exact match: no spray pays, the leak does
    (episode,) = report.episodes("tool_leak:first", 3)
    hints = [json.loads(o.output)["hint"] for s in episode.steps for o in s.tool_outputs]
    assert hints == ["p", "pl", "pla", "plan", "plane", "plane"]  # called until a call said nothing new
    assert episode.response.output_text == "plane"
    assert report.frame.set_index(["probe", "task"]).loc[("tool_leak:last", 0), "shortcut"] == (
        "a tool's output given as the answer"
    )
    fixed = probe(lab, lab.serve(OneLetterHint), HINT_ROWS, real_policy=unscrambles)
    assert fixed.flagged == [] and fixed.real_reward(None) == 1.0, fixed


def test_qa_as_shipped_before_was_flagged_and_is_fixed(lab):
    """The qa example paid the expected answer anywhere in at most 10 words: "Eiffel Hg 39" (every
    row's answer at once) earned 1.0 on every task. The shipped reward wants the answer alone."""
    qa = load_environment("qa")

    class ShippedQA(qa.QAEnv):
        def correct(self, answer, expected):
            return len(answer.split()) <= 10 and expected.lower() in answer.lower()

    probes = ["short_answer_spray", "answer_aware_spray", "answer_spray", "refusal"]
    before = probe(lab, lab.serve(ShippedQA), example_rows("qa"), probes=probes, real_policy=qa.policy)
    assert before.flagged == ["short_answer_spray"] and before.cell("short_answer_spray").mean_reward == 1.0
    (episode,) = before.episodes("short_answer_spray", 0)
    assert "Eiffel Hg" in episode.response.output_text and "39" in episode.response.output_text
    after = probe(lab, lab.serve(qa.QAEnv), example_rows("qa"), probes=probes, real_policy=qa.policy)
    assert after.flagged == [] and after.real_reward(None) == 1.0, after


def test_short_spray_holds_the_tasks_own_values_among_others():
    rows = [{"responses_create_params": {"input": f"q{i}"}, "answer": f"a{i}"} for i in range(20)]
    text = short_answer_spray(ResponseCreateParams(input="q15"), rows)
    words = text.split()[2:-2]
    assert "a15" in words and len(words) == 8 and words == sorted(words)  # its place says nothing
    assert short_answer_spray(ResponseCreateParams(input="q3"), rows[3:4]).split() == [*DECOYS, "a3", *DECOYS[::-1]]
    assert tool_leak(ResponseCreateParams(input="q")) == ""  # no tool: nothing to leak


def _exact(body) -> float:
    return float(body.response.output_text.strip() == WORDS[_scrambled(body)])


def _concise(body) -> float:
    return float(0 < len(body.response.output_text.split()) <= 8)


class RubricUnscramble(SimpleResourcesServer):
    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        rubric = Rubric(Component("correct", _exact, weight=0.7), Component("concise", _concise, weight=0.3))
        return await rubric.verify(body)


def test_a_rubric_flag_names_the_component_that_paid(lab):
    probes = ["empty_answer", "refusal", "answer_aware_spray", "long_answer"]
    report = probe(lab, lab.serve(RubricUnscramble), UNSCRAMBLE, probes=probes, real_policy=unscrambles)
    assert report.flagged == ["refusal"] and report.cell("refusal").mean_reward == 0.3, report
    assert report.components("refusal") == {"concise": 1.0, "correct": 0.0}
    assert report.reasons()["refusal"] == (
        "refusal: it earned a mean reward of 0.30 (above 0), paid by the component concise (mean value 1.00)"
        "; a component's value is before its weight, not the reward."
    )
    assert (
        "paid by the component concise (mean value 1.00)" in report.text()
        and "concise (mean value 1.00)" in report._repr_html_()
    )
    assert report.components("long_answer") == {"correct": 0.0, "concise": 0.0}


class MasksVerdicts(SimpleResourcesServer):
    """A grader that cannot read an answer holding a verdict word: it masks instead of paying 0."""

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        text = body.response.output_text
        if "CORRECT" in text:
            return BaseVerifyResponse(
                **body.model_dump(),
                reward=0.0,
                mask_sample=True,
                failure_kind="judge_unparseable",
                failure_reason="the verdict could not be read",
            )
        return BaseVerifyResponse(**body.model_dump(), reward=float(text.strip() == WORDS[_scrambled(body)]))


def says_correct(request):
    """Answer with a verdict instead of the word."""
    return "CORRECT"


def test_a_probe_masked_more_than_the_real_policy_is_flagged(lab):
    env = lab.serve(MasksVerdicts)
    probes = {"says_correct": says_correct, "refusal": refusal}
    report = probe(lab, env, UNSCRAMBLE, probes=probes, real_policy=unscrambles)
    cell = report.cell("says_correct")
    assert cell.mask_rate == 1.0 and math.isnan(cell.mean_reward) and cell.masked_more and not cell.above
    assert cell.real_mask_rate == 0.0 and report.flagged == ["says_correct"], report
    assert report.reasons()["says_correct"].startswith(
        "says_correct: 100% of its episodes were masked (judge_unparseable 4) against the real policy's 0%"
    )
    text = report.text()
    assert "says_correct *" in text and "100%!" in text and "masked" in text.splitlines()[0]
    frame = report.frame.set_index(["probe", "task"])
    assert frame.loc[("says_correct", 0), "mask_rate"] == 1.0 and frame.loc[("refusal", 0), "mask_rate"] == 0.0
    assert report.shortcuts() == {"your own": ["says_correct"], "no answer": ["refusal"]}
    # without a real run, any masked episode is more than none
    alone = probe(lab, env, UNSCRAMBLE, probes=probes)
    assert alone.flagged == ["says_correct"] and "masked (judge_unparseable 4):" in alone.reasons()["says_correct"]


def test_every_builtin_probe_has_a_shortcut_kind():
    from gymlab.probes.policies import SHORTCUTS

    assert set(BUILTIN_PROBES.values()) == set(SHORTCUTS)


def test_hostile_rows_and_prompts_stay_bounded_and_fast():
    """A megabyte prompt, a megabyte field, a 10,000-digit number, deep nesting, a row without a prompt,
    a huge tool output: every probe answers within its bounds, in well under a second each."""
    huge = " ".join(f"w{i:06d}" for i in range(150_000))  # 1 MB of distinct short tokens
    rows = [
        {"responses_create_params": {"input": huge}, "blob": "x" * 1_000_000, "n": "9" * 10_000},
        {"responses_create_params": {"input": "deep"}, "a": [[[[[["too deep"]]]]]], "b": {"c": [1, 2.5, True, None]}},
        {"no_prompt": "here"},
        {"responses_create_params": {"input": [{"role": "user", "content": 7}]}},  # invalid: no prompt
    ]
    index = RowIndex(rows)
    assert set(index) == {huge, "deep", ""}
    start = time.perf_counter()
    for text in (huge, "deep"):
        request = ResponseCreateParams(input=text)
        for probe_fn in (answer_aware_spray, short_answer_spray):
            answer = probe_fn(request, index)
            assert len(answer) <= SPRAY_CHARS + 40 and answer.split()[:2] == list(DECOYS)
            assert "x" * 1000 not in answer and "too deep" not in answer  # no megabyte guess, depth 3
    assert "2.5" in short_answer_spray(ResponseCreateParams(input="deep"), index).split()
    big_output = ResponseCreateParams(
        input=[
            {"role": "user", "content": "go"},
            *(
                item
                for i in range(2)
                for item in (
                    {"type": "function_call", "name": "hint", "arguments": "{}", "call_id": f"c{i}"},
                    {"type": "function_call_output", "call_id": f"c{i}", "output": "not json " * 100_000},
                )
            ),
        ],
        tools=[HINT_TOOL],
    )
    assert len(tool_leak(big_output)) == LONG_ANSWER_CHARS  # a repeated output: answered, clipped
    assert time.perf_counter() - start < 10  # under load; about 0.5 s on an idle core


class JudgedUnscramble(SimpleResourcesServer):
    """Graded by a judge model that reads labels (``rubric`` set at serve time)."""

    rubric: Rubric | None = None

    async def verify(self, body: WordVerifyRequest) -> BaseVerifyResponse:
        return await self.rubric.verify(body)


class WordVerifyRequest(BaseVerifyRequest):
    word: str


JUDGE_TEMPLATE = "Reference: {word}\nAnswer: {answer}\nReply CORRECT or INCORRECT."


def quoting_judge(request):
    """A judge that restates the answer before its verdict, as models often do."""
    prompt = request.input_items()[-1].text
    word, answer = (re.search(rf"^{k}: (.*)$", prompt, re.M).group(1) for k in ("Reference", "Answer"))
    return f'The answer given was "{answer}". Verdict: {"CORRECT" if answer.strip() == word else "INCORRECT"}'


def test_a_quoting_judge_and_the_verdict_probe_graded_0_or_flagged_never_masked_unflagged(lab):
    judge = Judge(
        "correct",
        lab.serve_model(quoting_judge, name="judge"),
        JUDGE_TEMPLATE,
        parse="label",
        labels={"CORRECT": 1.0, "INCORRECT": 0.0},
        attempts=1,
    )
    env = lab.serve(JudgedUnscramble, rubric=Rubric(judge))
    rows = [{**r, "word": w} for r, w in zip(UNSCRAMBLE, WORDS.values())]
    report = probe(lab, env, rows, real_policy=unscrambles)
    assert report.real_reward(None) == 1.0 and report.real_mask_rate(None) == 0.0
    for name in report.rollouts:
        episodes = report.episodes(name)
        graded_0 = all(not r.mask_sample and r.reward == 0.0 for r in episodes)
        assert graded_0 or name in report.flagged, (name, report)
    cell = report.cell("verdict_injection")
    assert cell.mask_rate > 0 or cell.mean_reward == 0.0
    if cell.mask_rate:  # a judge that cannot read its own quoted verdict masks the probe: flagged, and why
        assert "judge_unparseable" in report.reasons()["verdict_injection"]
