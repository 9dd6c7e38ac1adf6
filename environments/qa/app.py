"""Multi-turn Q&A: each answer is followed by the row's next follow-up question; the last answer is graded.

Row fields: ``follow_ups`` (the questions asked after the first one, in order) and
``expected_answer`` (reward 1.0 when it appears, case-insensitively, in a final answer of at most
``max_answer_words`` words: a longer text could hold any answer, and ``gymlab probe`` found that the
echoed prompt, the answer spray and an over-long answer all earned 1.0 without that bound).
"""

from __future__ import annotations

from gymlab import GymnasiumServer


class QAEnv(GymnasiumServer):
    max_answer_words: int = 10

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
        short = len(answer.split()) <= self.max_answer_words
        correct = bool(expected) and short and expected.lower() in answer.lower()
        info = {"answered": len(state["answers"]), "answer": answer, "expected_answer": expected, "correct": correct}
        return None, float(correct), True, False, info


#: The rule-based model's knowledge: the first key found in the latest question picks the answer.
ANSWERS = {
    "Eiffel Tower": "Paris.",
    "designed": "Gustave Eiffel's company designed and built it.",
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
