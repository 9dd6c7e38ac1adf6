"""Multi-turn Q&A: each answer is followed by the row's next follow-up question; the last answer is graded.

Row fields: ``follow_ups`` (the questions asked after the first one, in order) and
``expected_answer`` (reward 1.0 when the final answer is it, case, punctuation and spacing aside).
``gymlab probe`` found two looser checks gameable: the expected answer anywhere in the text paid the
echoed prompt, the answer spray and an over-long answer; anywhere in at most 10 words paid "Eiffel
Hg 39" (every row's answer at once) on every task.
"""

from __future__ import annotations

import re

from gymlab import GymnasiumServer


def normal(text: str) -> str:
    """Lowercase words without punctuation, single-spaced: "Hg." and " hg" read the same."""
    return " ".join(re.sub(r"[^\w\s]", " ", text.lower()).split())


class QAEnv(GymnasiumServer):
    def correct(self, answer: str, expected: str) -> bool:
        """The answer is the expected one, and nothing else."""
        return bool(normal(expected)) and normal(answer) == normal(expected)

    async def reset(self, metadata, session_id=None):
        self.session_state[session_id] = {"asked": 0, "answers": []}
        return None, {"questions": 1 + len(metadata.get("follow_ups", []))}

    async def step(self, action, metadata, session_id=None):
        state = self.session_state.get(session_id)
        if state is None:
            return (
                None,
                0.0,
                False,
                True,
                {
                    "mask_sample": True,
                    "failure_kind": "session_lost",
                    "failure_reason": "no conversation is held for this session; call /reset first",
                },
            )
        answer = action.output_text.strip()
        state["answers"].append(answer)
        follow_ups = metadata.get("follow_ups", [])
        if state["asked"] < len(follow_ups):
            question = follow_ups[state["asked"]]
            state["asked"] += 1
            return question, 0.0, False, False, {"answered": len(state["answers"])}
        expected = str(metadata.get("expected_answer", ""))
        correct = self.correct(answer, expected)
        info = {"answered": len(state["answers"]), "answer": answer, "expected_answer": expected, "correct": correct}
        return None, float(correct), True, False, info


#: The rule-based model's knowledge: the first key found in the latest question picks the answer.
ANSWERS = {
    "Eiffel Tower": "Paris.",
    "designed": "Eiffel.",
    "closest to the Sun": "Mercury.",
    "chemical symbol": "Hg.",
    "2 + 2": "4",
    "Multiply that by 10": "40",
    "subtract 1": "39",
}


def policy(request):
    """Answer the latest user question from ``ANSWERS``."""
    users = [i.text for i in request.input_items() if i.type == "message" and i.role == "user"]
    question = users[-1] if users else ""
    return next((a for k, a in ANSWERS.items() if k in question), "I don't know.")


if __name__ == "__main__":
    QAEnv.run_webserver()
