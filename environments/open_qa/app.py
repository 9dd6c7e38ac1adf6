"""Open-ended questions graded by a judge model against a reference answer, plus a brevity bonus.

Row fields: ``reference_answer``. The reward is a rubric (``gymlab.rewards``): ``correct`` (weight
0.8), a judge model's CORRECT/INCORRECT verdict given the question, the reference and the answer,
and ``concise`` (weight 0.2), 1.0 for an answer of at most ``max_words`` words, gated by ``correct``.
A judge that fails or answers something else masks the episode (``judge_failed`` / ``judge_unparseable``).

``judge_policy`` is a rule-based judge, so everything runs offline: CORRECT when the answer's first
sentence is the reference (case and punctuation aside). ``policy`` answers the example questions, one
of them right only every other time.

``gymlab probe`` found the first version gameable: ``concise`` paid any short answer 0.2 (a refusal,
"Done.", a verdict written for the judge), and a judge that accepted any answer holding the
reference paid the sprays that list every row's answers at once.
"""

from __future__ import annotations

import itertools
import re
from typing import Any

from gymlab import BaseVerifyRequest, BaseVerifyResponse, Component, Judge, Rubric, SimpleResourcesServer

JUDGE_TEMPLATE = """Grade the answer to the question against the reference answer.
Question: {question}
Reference answer: {reference_answer}
Answer: {answer}
Reply with one word: CORRECT or INCORRECT."""


class OpenQAVerifyRequest(BaseVerifyRequest):
    reference_answer: str


class OpenQAVerifyResponse(BaseVerifyResponse):
    reference_answer: str  # echoed, so a stored record can be graded again without its dataset row


def concise(body: Any, max_words: int = 30) -> float:
    """1.0 for a non-empty answer of at most ``max_words`` words."""
    words = body.response.output_text.split()
    return float(0 < len(words) <= max_words)


def open_qa_rubric(judge_model: Any, *, correct: float = 0.8, brevity: float = 0.2, **judge_options: Any) -> Rubric:
    """The environment's rubric: a judge of correctness and a brevity bonus paid only on a correct answer."""
    judge = Judge(
        "correct",
        judge_model,
        JUDGE_TEMPLATE,
        parse="label",
        labels={"CORRECT": 1.0, "INCORRECT": 0.0},
        weight=correct,
        **judge_options,
    )
    return Rubric(judge, Component("concise", concise, weight=brevity, gate="correct"))


class OpenQAServer(SimpleResourcesServer):
    """Config: ``rubric`` (a ``Rubric``), or ``judge_model`` (a model server's URL; in YAML a
    ``{type: responses_api_models, name: ...}`` ref) for the default rubric."""

    judge_model: str = ""
    rubric: Rubric | None = None

    def grading_rubric(self) -> Rubric:
        if self.rubric is None:
            if not self.judge_model:
                raise ValueError(f"{self.name}: set judge_model (a model server's URL) or pass a rubric")
            self.rubric = open_qa_rubric(self.judge_model)  # built once: its judge's limit holds across episodes
        return self.rubric

    async def verify(self, body: OpenQAVerifyRequest) -> OpenQAVerifyResponse:
        return await self.grading_rubric().verify(body, OpenQAVerifyResponse)


def normal(text: str) -> str:
    """Lowercase words without punctuation (an apostrophe kept), single-spaced."""
    return " ".join(re.sub(r"[^a-z0-9' ]", " ", text.lower().replace("\u2019", "'")).split())


def reference_and_answer(request) -> tuple[str, str]:
    """The reference and the whole answer in a judge request made from ``JUDGE_TEMPLATE``."""
    prompt = request.input_items()[-1].text
    reference = re.search(r"^Reference answer: (.*)$", prompt, re.M)
    answer = prompt.partition("\nAnswer: ")[2].rpartition("\n")[0]  # up to the template's last line
    return (reference.group(1) if reference else ""), answer


def judge_policy(request) -> str:
    """A rule-based judge: CORRECT when the answer's first sentence is the reference (case and
    punctuation aside). The answer must commit to one answer: a list of candidates holding the
    reference somewhere is INCORRECT."""
    reference, answer = reference_and_answer(request)
    first = re.split(r"(?<=[.!?])\s", answer.strip(), maxsplit=1)[0]
    return "CORRECT" if normal(reference) and normal(first) == normal(reference) else "INCORRECT"


_alternate = itertools.cycle(["Jane Austen.", "Charlotte Bronte."])

ANSWERS = {
    "seasons": "The tilt of Earth's axis.",
    "sky": (
        "Rayleigh scattering. Sunlight is scattered by the molecules of the air, and the short blue wavelengths "
        "are scattered far more than the long red ones, so whichever way you look away from the Sun the sky "
        "shows mostly scattered blue light."
    ),
    "boiling": "About 90 degrees.",
}


def policy(request) -> str:
    """Answers the example questions: one right and brief, one right but long, one wrong, one alternating."""
    question = request.input_items()[-1].text.lower()
    if "pride and prejudice" in question:
        return next(_alternate)
    return next((a for k, a in ANSWERS.items() if k in question), "I don't know.")


if __name__ == "__main__":
    OpenQAServer.run_webserver()
