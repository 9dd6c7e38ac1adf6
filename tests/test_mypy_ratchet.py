"""The type check's ratchet (tools/mypy_ratchet.py): what fails `make test`, what only says to lower the baseline.

mypy itself runs in `make test` (a cold check takes tens of seconds); these tests feed the ratchet mypy's
output as mypy writes it, and check the configuration the real run reads.
"""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("mypy_ratchet", ROOT / "tools" / "mypy_ratchet.py")
ratchet = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ratchet)

STRICT = ["gymlab/protocol/", "gymlab/_http/"]


def mypy_output(*errors: str, files: int = 1) -> str:
    """What mypy prints: the error lines, then its summary (singular or plural, as mypy words it)."""
    n, s = len(errors), "s" if len(errors) != 1 else ""
    found = f"Found {n} error{s} in {files} file{'s' if files != 1 else ''} (checked 9 source files)"
    return "\n".join([*errors, found if errors else "Success: no issues found in 9 source files"]) + "\n"


E1 = 'gymlab/loop.py:153: error: "None" not callable  [misc]'
E2 = 'gymlab/retry.py:27:5: error: Item "None" of "str | None" has no attribute \'startswith\'  [union-attr]'


def test_a_count_at_or_under_the_baseline_passes():
    assert ratchet.judge(mypy_output(E1, E2), 1, 2, STRICT) == (2, [])
    assert ratchet.judge(mypy_output(E1), 1, 2, STRICT) == (1, [])
    assert ratchet.judge(mypy_output(), 0, 2, STRICT) == (0, [])


def test_a_count_over_the_baseline_fails_and_says_how_to_see_the_errors():
    count, problems = ratchet.judge(mypy_output(E1, E2), 1, 1, STRICT)
    assert count == 2 and len(problems) == 1
    assert "2 errors, over the baseline of 1" in problems[0] and "python -m mypy" in problems[0]


def test_an_error_in_a_strict_package_fails_even_under_the_baseline():
    strict_error = "gymlab/protocol/record.py:12: error: Missing type arguments  [type-arg]"
    count, problems = ratchet.judge(mypy_output(E1, strict_error), 1, 100, STRICT)
    assert count == 2 and problems == [f"strict package: {strict_error}"]


@pytest.mark.parametrize(
    "output, returncode",
    [
        ("", 2),  # mypy could not start
        ("Traceback (most recent call last):\n  ...\nRuntimeError: boom\n", 2),  # a crash midway
        (mypy_output(E1), 2),  # a summary, but a crash's exit status
        (E1 + "\n", 1),  # errors without the summary: killed before the end
        ("pyproject.toml: [mypy]: unrecognised option\n", 0),
    ],
)
def test_a_run_that_did_not_finish_fails_rather_than_counting_nothing(output, returncode):
    count, problems = ratchet.judge(output, returncode, 10_000, STRICT)
    assert count is None and len(problems) == 1 and f"exit {returncode}" in problems[0]


def test_a_summary_that_disagrees_with_the_error_lines_fails():
    output = E1 + "\nFound 3 errors in 1 file (checked 9 source files)\n"
    assert ratchet.judge(output, 1, 10, STRICT) == (3, ["mypy reported 3 errors but printed 1 error lines"])


def test_notes_and_errors_quoted_inside_messages_are_not_counted():
    note = "gymlab/loop.py:10: note: By default the bodies of untyped functions are not checked"
    quoting = 'gymlab/loop.py:11: note:     Got: "gymlab/x.py:1: error: y"'
    assert ratchet.judge(mypy_output(E1) + note + "\n" + quoting + "\n", 1, 1, STRICT)[0] == 1


@pytest.mark.parametrize("text", ["", "abc", "-3", "12\n13", "1e9"])
def test_a_malformed_baseline_is_a_clear_error(tmp_path, text):
    path = tmp_path / "mypy_baseline.txt"
    path.write_text(text)
    with pytest.raises(SystemExit, match="expected one error count"):
        ratchet.read_baseline(path)


def test_the_committed_baseline_is_a_count():
    assert ratchet.read_baseline() >= 0


def test_the_strict_packages_are_read_from_pyproject():
    assert ratchet.strict_prefixes() == ["gymlab/protocol/", "gymlab/_http/", "gymlab/run/"]


def test_the_strict_override_sets_every_per_module_flag_of_mypy_strict(tmp_path):
    """`strict = true` in an override turns strict on for every module (mypy's own quirk), so the override
    spells out the flags: exactly those ``--strict`` sets per module."""
    from mypy.main import process_options
    from mypy.options import PER_MODULE_OPTIONS

    (tmp_path / "mypy.ini").write_text("[mypy]\n")  # mypy's defaults, not this repo's configuration
    _, strict = process_options(["--config-file", str(tmp_path / "mypy.ini"), "--strict", "-c", "pass"])
    _, plain = process_options(["--config-file", str(tmp_path / "mypy.ini"), "-c", "pass"])
    wanted = {k: getattr(strict, k) for k in PER_MODULE_OPTIONS if getattr(strict, k) != getattr(plain, k)}
    overrides = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["overrides"]
    (override,) = [o for o in overrides if o.get("disallow_untyped_defs")]
    assert {k: v for k, v in override.items() if k != "module"} == wanted


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_test_runs_the_ratchet_and_test_fast_leaves_the_slow_tests_out():
    def commands(target: str) -> list[str]:
        out = subprocess.run(
            ["make", "-n", "-B", target, "VENV=/nonexistent/venv"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        return out.splitlines()

    test = commands("test")
    at = next(i for i, line in enumerate(test) if "tools/mypy_ratchet.py" in line)
    assert at < next(i for i, line in enumerate(test) if "-m pytest" in line)
    assert not any(re.search(r"-m ['\"]?not slow", line) for line in test)  # make test runs everything
    assert any(line.endswith('-m "not slow"') for line in commands("test-fast"))
