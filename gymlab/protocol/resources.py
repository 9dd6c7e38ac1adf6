"""Request and response bodies of the resources-server protocols (seed/verify, metrics)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gymlab.protocol.responses import NeMoGymResponse, ResponseCreateParams, dump_params

SESSION_ID_KEY = "session_id"


class BaseRunRequest(BaseModel):
    """A dataset row: the model request plus whatever the subclass declares."""

    responses_create_params: ResponseCreateParams


class AgentRunRequest(BaseRunRequest):
    """A dataset row as an agent's ``/run`` takes it: ``responses_create_params`` validated, the rest kept."""

    model_config = ConfigDict(extra="allow")


def dump_row(body: AgentRunRequest) -> dict[str, Any]:
    """The whole row as sent to seed/verify/reset/step: every field, params fully dumped (``dump_params``)."""
    row = body.model_dump(mode="json", exclude={"responses_create_params"})
    row["responses_create_params"] = dump_params(body.responses_create_params)
    return row


class BaseSeedSessionRequest(BaseModel):
    """Body of ``/seed_session``; subclasses declare the fields that initialise an episode."""


class BaseSeedSessionResponse(BaseModel):
    pass


class BaseVerifyRequest(BaseRunRequest):
    """Body of ``/verify``: the request and the completed response (undeclared fields dropped, as in the reference)."""

    response: NeMoGymResponse


def _unset(value: Any) -> bool:
    """Whether an optional field gymlab adds to a verify answer is unset: then it is not written (the
    reference's own fields always are)."""
    return value is None


class BaseVerifyResponse(BaseVerifyRequest):
    reward: float
    mask_sample: bool = False
    failure_kind: str | None = None
    failure_reason: str | None = None
    reward_components: dict[str, float | None] | None = Field(
        None,
        exclude_if=_unset,
        description="Optional: the reward by rubric component (gymlab.rewards); None for a failed judge.",
    )
    judgements: list[dict[str, Any]] | None = Field(
        None, exclude_if=_unset, description="Optional: what each judge asked and answered."
    )
    answer_error: str | None = Field(
        None,
        exclude_if=_unset,
        description="Optional: why the model's own answer broke grading (graded 0, not masked: AnswerError).",
    )
    response_too_large: str | None = Field(
        None, exclude_if=_unset, description="Optional: why the answer was too large to grade (graded 0, not masked)."
    )


class AggregateMetricsRequest(BaseModel):
    verify_responses: list[dict[str, Any]] = Field(default_factory=list)


class AggregateMetrics(BaseModel):
    model_config = ConfigDict(extra="allow")

    agent_metrics: dict[str, Any] = Field(default_factory=dict)
    key_metrics: dict[str, Any] = Field(default_factory=dict)
    group_level_metrics: list[dict[str, Any]] = Field(default_factory=list)
