"""The OpenEnv and verifiers tests, run in the venvs `make test` makes for them (``.venv-openenv``,
``.venv-verifiers``): neither library installs beside the `mcp` extra of the test venv, nor beside the other."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("extra", ["openenv", "verifiers"])
def test_the_library_tests_pass_in_their_own_venv(extra):
    python = REPO / f".venv-{extra}" / "bin" / "python"
    if not python.exists():
        pytest.skip(f".venv-{extra} is missing: `make test` (or `make .venv-{extra}/.installed`) makes it")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    proc = subprocess.run(
        [str(python), "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs", f"tests/envs/test_{extra}.py"]
        + ["tests/envs/test_fuzz_envs.py", "-k", f"not test_no_input_gets_a_server_error or {extra}"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    tail = proc.stdout[-3000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    assert " passed" in proc.stdout and "skipped" not in proc.stdout and "failed" not in proc.stdout, tail
