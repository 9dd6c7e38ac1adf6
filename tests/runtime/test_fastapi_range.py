"""``_runtime/direct.py`` reads FastAPI's internals, so it runs only under the FastAPI releases it is
tested with: pyproject.toml pins its ``FASTAPI_RANGE``, and the direct-route tests pass under both
ends of it (the end not installed here is installed alone into a folder first on the path, over
this environment's Starlette and pydantic; it needs the package index or pip's cache)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import fastapi
import pytest

from gymlab._runtime.direct import FASTAPI_RANGE

ROOT = Path(__file__).resolve().parents[2]


def test_pyproject_pins_the_range_direct_routes_run_under():
    pin = re.search(r'"fastapi>=(\d+)\.(\d+),<(\d+)\.(\d+)"', (ROOT / "pyproject.toml").read_text())
    assert pin, "pyproject.toml pins fastapi as >=A.B,<C.D"
    low, high = (int(pin[1]), int(pin[2])), (int(pin[3]), int(pin[4]) - 1)
    assert (low, high) == FASTAPI_RANGE


@pytest.mark.parametrize("end", [0, 1], ids=["lowest", "highest"])
def test_direct_routes_answer_as_fastapi_does_under_both_ends_of_the_range(tmp_path, end):
    version = "{}.{}.0".format(*FASTAPI_RANGE[end])
    path = [str(ROOT)]
    if fastapi.__version__ != version:
        pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(tmp_path)]
        subprocess.run([*pip, f"fastapi=={version}"], check=True, timeout=600, capture_output=True)
        path.insert(0, str(tmp_path))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    env.pop("GYMLAB_DIRECT_ROUTES", None)
    found = subprocess.run(
        [
            sys.executable,
            "-c",
            "import fastapi; from gymlab._runtime.direct import direct_enabled as d; print(fastapi.__version__, d())",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    ).stdout.split()
    assert found == [version, "True"]
    tests = str(ROOT / "tests" / "runtime" / "test_direct_routes.py")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", tests],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
    )
    assert done.returncode == 0, done.stdout[-4000:]
    assert " passed" in done.stdout and "skipped" not in done.stdout
