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
