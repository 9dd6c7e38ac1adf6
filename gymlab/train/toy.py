"""A learnable toy: a single-turn task whose reward a tiny random model already earns now and then, so
GRPO through the server's ``/verify`` has something to raise (tests/train/test_toy.py, docs/train.md)."""

from __future__ import annotations

from gymlab.protocol.resources import BaseVerifyRequest, BaseVerifyResponse
from gymlab.resources.simple import SimpleResourcesServer

PROMPT = "Say a number."


class SayDigitServer(SimpleResourcesServer):
    """Reward 1 when the answer holds a digit, else 0: a property a random-init model's short answers
    hit about a third of the time, and that a few GRPO steps can make it hit far more often."""

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        text = body.response.output_text
        return BaseVerifyResponse(**body.model_dump(), reward=float(any(c.isdigit() for c in text)))


def toy_rows(n: int = 8) -> list[dict]:
    """``n`` rows of the toy task (the same prompt: the reward is about the answer's form)."""
    return [{"responses_create_params": {"input": PROMPT}} for _ in range(n)]
