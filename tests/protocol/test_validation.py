"""One line for a pydantic validation error, the same in every message that reports a bad value."""

import pytest
from pydantic import BaseModel, ConfigDict, ValidationError

from gymlab.protocol import ResponseCreateParams
from gymlab.protocol.validation import describe_validation


class Inner(BaseModel):
    model_config = ConfigDict(extra="forbid")
    n: int


class Outer(BaseModel):
    model_config = ConfigDict(extra="forbid")
    inner: Inner
    items: list[int] = []


def _error(cls, value) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        cls.model_validate(value)
    return info.value


def test_an_unknown_key_is_named_with_its_parent():
    assert describe_validation(_error(ResponseCreateParams, {"input": "x", "temprature": 1})) == (
        "unknown key 'temprature'"
    )
    assert describe_validation(_error(Outer, {"inner": {"n": 1, "m": 2}})) == "inner: unknown key 'm'"


def test_each_error_is_located_and_a_flood_is_cut():
    assert describe_validation(_error(Outer, {"inner": {"n": "x"}})).startswith("inner.n: Input should be")
    flood = _error(Outer, {"inner": {"n": 1}, "items": ["a"] * 1000})
    text = describe_validation(flood)
    assert text.count("items.") == 3 and text.endswith("; and 997 more")
    assert describe_validation(flood.errors()) == text  # the list FastAPI hands over reads the same


def test_an_error_without_a_location_names_the_default():
    assert describe_validation(_error(Outer, 3), "row").startswith("row: Input should be")
