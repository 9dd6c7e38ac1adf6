"""``gymlab init``: the folder it writes passes its own test at once; an existing folder is refused.
``python -m gymlab`` and ``gymlab --version``."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

import gymlab
from gymlab.cli import main

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("flags", [[], ["--gymnasium"]], ids=["simple", "gymnasium"])
def test_the_new_environment_passes_its_own_test(tmp_path, flags):
    assert main(["init", str(tmp_path / "myenv"), *flags]) == 0
    written = sorted(str(p.relative_to(tmp_path / "myenv")) for p in (tmp_path / "myenv").rglob("*") if p.is_file())
    assert written == ["README.md", "app.py", "configs/myenv.yaml", "data/example.jsonl", "test_app.py"]
    result = run("-m", "pytest", "-q", "-p", "no:cacheprovider", cwd=tmp_path / "myenv")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout


NO_PYTEST = """
import importlib.abc, sys

class NoPytest(importlib.abc.MetaPathFinder):  # as in a venv made by `make demo`: no test tools
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("pytest", "_pytest"):
            raise ModuleNotFoundError(f"No module named {name!r}")

sys.meta_path.insert(0, NoPytest())
from gymlab.cli import main
raise SystemExit(main(["init", "myenv"]))
"""


def test_init_prints_a_test_command_that_runs_where_it_is_printed(tmp_path):
    """Without pytest it prints `python test_app.py`, which runs the tests; with it, `python -m pytest`."""
    done = run("-c", NO_PYTEST, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    command = done.stdout.strip().split("try: ", 1)[1]
    assert command.startswith("cd myenv && ") and command.endswith(" test_app.py") and "pytest" not in command
    ran = subprocess.run(command, shell=True, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert ran.returncode == 0 and ran.stdout.splitlines()[-1] == "3 passed", ran.stdout + ran.stderr
    # a test file whose tests are gone fails when run, never exits 0 having run nothing
    app_test = tmp_path / "myenv" / "test_app.py"
    app_test.write_text(app_test.read_text().replace("def test_", "def check_"))
    empty = run("test_app.py", cwd=tmp_path / "myenv")
    assert empty.returncode == 1 and "no test ran" in empty.stderr, empty.stdout + empty.stderr


def test_init_says_python_m_pytest_where_pytest_is_installed(tmp_path, capsys):
    assert main(["init", str(tmp_path / "myenv")]) == 0
    printed = capsys.readouterr().out
    assert printed.rstrip().endswith("-m pytest") and f"cd {tmp_path / 'myenv'} && " in printed


def test_an_existing_folder_is_refused_in_one_line(tmp_path, capsys):
    (tmp_path / "taken").mkdir()
    (tmp_path / "taken" / "keep.txt").write_text("mine")
    assert main(["init", str(tmp_path / "taken")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "already exists" in err
    assert [p.name for p in (tmp_path / "taken").iterdir()] == ["keep.txt"]


@pytest.mark.parametrize(
    "name, reason",
    [
        ("9-lives", "start with a letter"),
        ("yes", "YAML reads it as True"),
        ("on", "YAML reads it as True"),
        ("Off", "YAML reads it as False"),
        ("null", "YAML reads it as None"),
        ("NULL", "YAML reads it as None"),
        ("class", "a Python keyword"),
        ("test", "the name of its own test module"),
    ],
)
def test_a_name_the_environment_would_break_on_is_refused_in_one_line(tmp_path, name, reason):
    """``gymlab init yes|on|null|test`` once wrote an environment whose own test failed."""
    done = run("-m", "gymlab", "init", name, cwd=tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    [line] = done.stderr.splitlines()
    assert line.startswith(f"gymlab init: error: {name!r} is not a usable name: ") and reason in line
    assert list(tmp_path.iterdir()) == []


def test_python_dash_m_gymlab_and_version(tmp_path):
    result = run("-m", "gymlab", "--version", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"gymlab {gymlab.__version__}"
