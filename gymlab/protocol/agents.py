"""The rollout record: what an agent's ``/run`` returns and what every later layer reads.

One record type carries an episode end to end (collection writes it, frames read it, export
writes it). The NeMo Gym fields come first; ``steps`` and the timing fields are gymlab's additions.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gymlab.protocol.responses import Item, NeMoGymResponse, ResponseCreateParams


class StepRecord(BaseModel):
    """One step of an episode: a model turn (or Gymnasium transition) and what it caused."""

    model_config = ConfigDict(extra="allow")

    index: int
    action: list[Item] = Field(default_factory=list, description="The model's output items.")
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    observation: str | None = None
    info: dict[str, Any] = Field(default_factory=dict)
    tool_outputs: list[Item] = Field(default_factory=list)
    duration_s: float = 0.0


class Rollout(BaseModel):
    """A finished episode, as ``/run`` returns it (plus any fields the verify echoed back)."""

    model_config = ConfigDict(extra="allow")

    responses_create_params: ResponseCreateParams
    response: NeMoGymResponse
    reward: float = 0.0
    mask_sample: bool = False
    failure_kind: str | None = None
    failure_reason: str | None = None
    terminated: bool | None = Field(None, description="Gymnasium episodes: the final step's flag.")
    truncated: bool | None = Field(None, description="Gymnasium episodes: the final step's flag.")
    info: dict[str, Any] | None = Field(None, description="Gymnasium episodes: the final step's info.")
    steps: list[StepRecord] = Field(default_factory=list)
    duration_s: float = 0.0
