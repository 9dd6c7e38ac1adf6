"""Bodies of the Gymnasium protocol: ``/reset`` and ``/step`` (and gymlab's ``/close``)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from gymlab.protocol.resources import BaseRunRequest
from gymlab.protocol.responses import NeMoGymResponse

#: Keys of a step's ``info`` that ``/step`` lifts out into the step response.
RESERVED_INFO_KEYS = ("mask_sample", "failure_kind", "failure_reason")


class GymnasiumResetRequest(BaseRunRequest):
    """Body of ``/reset``: the whole dataset row; fields besides the params are the episode's metadata."""

    model_config = ConfigDict(extra="allow")

    def metadata(self) -> dict[str, Any]:
        """Every top-level field except ``responses_create_params`` (and a step's ``response``)."""
        return self.model_dump(mode="json", exclude={"responses_create_params", "response"})


class GymnasiumResetResponse(BaseModel):
    observation: str | None = None
    info: dict[str, Any] = Field(default_factory=dict)


class GymnasiumStepRequest(GymnasiumResetRequest):
    """Body of ``/step``: the whole row plus ``response``, the model's response for this step (the action)."""

    response: NeMoGymResponse


class GymnasiumStepResponse(BaseModel):
    observation: str | None = None
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = Field(default_factory=dict)
    mask_sample: bool = False
    failure_kind: str | None = None
    failure_reason: str | None = None


class GymnasiumCloseResponse(BaseModel):
    """Answer of ``/close``: whether the session still held an episode that is now released."""

    closed: bool
