"""What the spec's "Seed/Verify State" sample leaves to the reader: its request models and helpers."""

from gymlab import BaseSeedSessionRequest, BaseVerifyRequest, BaseVerifyResponse


class SeedRequest(BaseSeedSessionRequest):
    secret: int


class VerifyRequest(BaseVerifyRequest):
    secret: int


def initialize(body):
    return {"secret": body.secret}


def grade(state, body):
    return float(str(state["secret"]) in body.response.output_text)


def make_verify_response(body, reward):
    return BaseVerifyResponse(**body.model_dump(), reward=reward)
