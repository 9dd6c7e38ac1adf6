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


def test_a_name_that_cannot_name_a_class_is_refused(tmp_path, capsys):
    assert main(["init", str(tmp_path / "9-lives")]) == 2
    assert "not a usable name" in capsys.readouterr().err
    assert not (tmp_path / "9-lives").exists()


def test_python_dash_m_gymlab_and_version(tmp_path):
    result = run("-m", "gymlab", "--version", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == f"gymlab {gymlab.__version__}"
