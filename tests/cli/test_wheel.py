"""The built wheel, installed alone into a fresh virtual environment, works like a checkout.

Build the wheel from a copy of the sources, make a venv, install the wheel (its dependencies come
from the package index or pip's cache) and pytest, then from a temporary folder, without PYTHONPATH:
``gymlab demo``, ``gymlab init`` + its own test, and notebook 01's code as a script. Slow (a minute
or more, mostly pip): marked ``wheel``; ``-m "not wheel"`` leaves it out.
"""

from __future__ import annotations

import ast
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.wheel

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ["pyproject.toml", "setup.py", "README.md", "gymlab", "environments"]
TIMEOUT_S = 900


def sh(*args, cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    result = subprocess.run([str(a) for a in args], cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    assert result.returncode == 0, (
        f"{args} exited {result.returncode}:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    )
    return result


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    """(bin folder, clean environment, work folder) of a fresh venv holding only the wheel and pytest."""
    tmp = tmp_path_factory.mktemp("wheel")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    src = tmp / "src"
    src.mkdir()
    for name in SOURCES:  # a copy: no stale build/ of the checkout can leak into the wheel
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(ROOT / name, src / name)
    t0 = time.perf_counter()
    sh(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", tmp / "dist", src, cwd=tmp, env=env)
    t1 = time.perf_counter()
    sh(sys.executable, "-m", "venv", tmp / "venv", cwd=tmp, env=env)
    bin_ = tmp / "venv" / "bin"
    (wheel,) = (tmp / "dist").glob("gymlab-*.whl")
    sh(bin_ / "python", "-m", "pip", "install", "-q", wheel, "pytest", cwd=tmp, env=env)
    t2 = time.perf_counter()
    print(f"\nwheel built in {t1 - t0:.1f} s; venv made and wheel + dependencies installed in {t2 - t1:.1f} s")
    work = tmp / "work"
    work.mkdir()
    return bin_, env, work


def test_the_package_comes_from_the_venv_not_the_checkout(venv):
    bin_, env, work = venv
    out = sh(
        bin_ / "python",
        "-c",
        "import gymlab, gymlab.examples as e; print(gymlab.__file__); print(e.ENVIRONMENTS_DIR)",
        cwd=work,
        env=env,
    ).stdout.split()
    assert all(Path(p).is_relative_to(bin_.parent) for p in out), out
    assert (Path(out[0]).parent / "py.typed").is_file()  # PEP 561: type checkers read the package's annotations
    assert sh(bin_ / "gymlab", "--version", cwd=work, env=env).stdout.startswith("gymlab ")


def test_demo_prints_its_table_and_writes_rollouts(venv):
    bin_, env, work = venv
    out = sh(bin_ / "gymlab", "demo", "--repeats", "2", "--out", "demo", cwd=work, env=env).stdout
    print(out)
    assert out.splitlines()[0].split()[:3] == ["environment", "agent", "episodes"]
    for name in ("calculator", "counter", "blackjack", "qa"):
        assert name in out
        assert (work / "demo" / f"{name}_rollouts.jsonl").read_text().strip()


def test_init_writes_an_environment_that_passes_its_test(venv):
    bin_, env, work = venv
    sh(bin_ / "gymlab", "init", "myenv", cwd=work, env=env)
    out = sh(bin_ / "python", "-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=work / "myenv", env=env).stdout
    assert "3 passed" in out, out


def test_notebook_01_code_runs_as_a_script(venv):
    bin_, env, work = venv
    notebook = json.loads((ROOT / "notebooks" / "01_quickstart.ipynb").read_text())
    script = work / "quickstart.py"
    script.write_text("\n".join(_printing(cell) for cell in _code_cells(notebook)))
    out = sh(bin_ / "python", script, cwd=work, env=env).stdout
    assert out.splitlines()[0] == "1.0", out[:2000]


def _code_cells(notebook: dict) -> list[str]:
    return ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code"]


def _printing(cell: str) -> str:
    """The cell as script code that prints its last expression, as the notebook shows it."""
    tree = ast.parse(cell)
    last = tree.body[-1] if tree.body else None
    if isinstance(last, ast.Expr) and not (
        isinstance(last.value, ast.Call) and getattr(last.value.func, "id", "") == "display"
    ):
        tree.body[-1] = ast.Expr(ast.Call(ast.Name("print", ast.Load()), [last.value], []))
    return ast.unparse(ast.fix_missing_locations(tree))
