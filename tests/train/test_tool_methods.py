"""Tool methods built from route request models: the schemas TRL reads, for awkward and hostile models."""

from __future__ import annotations

from typing import Literal

import pytest
from fastapi import Request
from pydantic import BaseModel, Field

from gymlab import BaseVerifyRequest, BaseVerifyResponse, SimpleResourcesServer
from gymlab.train import environment_factory
from gymlab.train.environments import tool_method


class Inner(BaseModel):
    x: int


class Awkward(BaseModel):
    name: str = Field(description="Who.\nOn two lines.")
    mode: Literal["a", "b"] = "a"
    maybe: int | None = None
    tags: list[str] = Field(default_factory=list)
    inner: Inner | None = None


def test_awkward_fields_become_a_schema_trl_accepts():
    from transformers.utils import get_json_schema

    method = tool_method("pick", "Pick one.", Awkward)
    schema = get_json_schema(method)["function"]
    props = schema["parameters"]["properties"]
    assert schema["parameters"]["required"] == ["name"]
    assert props["name"] == {"type": "string", "description": "Who. On two lines."}
    assert props["mode"]["enum"] == ["a", "b"]
    assert props["tags"]["type"] == "array"
    assert props["inner"]["type"] == "object"  # a nested model: its JSON object, checked by the route


def test_a_route_without_arguments_is_a_method_without_parameters():
    from transformers.utils import get_json_schema

    schema = get_json_schema(tool_method("ping", "", None))["function"]
    assert schema["name"] == "ping" and schema["parameters"]["properties"] == {}


class Clashing(SimpleResourcesServer):
    def setup_webserver(self):
        app = super().setup_webserver()
        app.post("/get_reward")(self.reset_board)
        return app

    async def reset_board(self, request: Request) -> dict:
        """Reset the board."""
        return {}

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=0.0)


def test_a_tool_route_named_like_trls_own_methods_is_refused(lab):
    env = lab.serve(Clashing, name="clashing")
    with pytest.raises(ValueError, match=r"clashing: tool route\(s\) \[.get_reward.\] collide"):
        environment_factory(lab, env)


def test_a_gymnasium_server_is_pointed_to_the_rollout_func(lab):
    from tests.train.test_gymnasium_rollout import TwoTurns

    env = lab.serve(TwoTurns, name="two_turns")
    with pytest.raises(TypeError, match="gymnasium_rollout_func"):
        environment_factory(lab, env)
