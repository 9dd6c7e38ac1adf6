"""Shared fixtures: a Lab whose servers are real uvicorn servers on 127.0.0.1, closed after each test."""

from __future__ import annotations

import pytest

from gymlab import Lab
from gymlab.examples import example_rows, load_environment


@pytest.fixture
def lab():
    with Lab() as lab:
        yield lab


@pytest.fixture
def calculator():
    return load_environment("calculator")


@pytest.fixture
def counter():
    return load_environment("counter")


@pytest.fixture
def rows():
    return example_rows
