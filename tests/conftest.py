"""Shared fixtures: a Lab whose servers are real uvicorn servers on 127.0.0.1, closed after each test."""

from __future__ import annotations

import pytest

# pytest compiles a plugin's modules (assertion rewriting) when they are first imported. schemathesis
# imports its OpenAPI modules at the first schema a test loads, mid-run on a deep stack, where
# CPython 3.11's AST constructor can fail its recursion-depth check (SystemError, cpython#106905):
# compiled here, at start-up, instead.
try:
    import schemathesis.specs.openapi.schemas  # noqa: F401
except ImportError:  # the side venvs (.venv-openenv, .venv-verifiers) run their own files without it
    pass

from pathlib import Path

from gymlab import Lab
from gymlab.examples import example_rows, load_environment

#: Tests marked ``slow`` by where they live (a Ray cluster, a kernel, a browser, a fresh venv each):
#: `make test` runs them; `make test-fast` (``-m "not slow"``) leaves them out.
SLOW = ("ray/", "notebooks/", "browser/", "cli/test_wheel.py")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if item.path.relative_to(here).as_posix().startswith(SLOW):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def lab():
    with Lab() as lab:
        yield lab


@pytest.fixture(params=["in-process", "wire"])
def lab_both(request):
    """A Lab in each transport: calls between its servers in-process, then over loopback HTTP.
    Episode tests use it (``lab = lab_both`` in their module) so both pass the same checks."""
    with Lab(wire=request.param == "wire") as lab:
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
