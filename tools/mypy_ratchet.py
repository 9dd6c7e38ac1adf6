"""The type check of `make test`: `mypy gymlab` may never report more errors than tools/mypy_baseline.txt
records, and none in a strict package (pyproject.toml's override that sets ``disallow_untyped_defs``).

    python tools/mypy_ratchet.py            # check (mypy's incremental cache: .mypy_cache/)
    python tools/mypy_ratchet.py --update   # after fixing errors: record the lower count (a whole check), then commit it
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BASELINE = ROOT / "tools" / "mypy_baseline.txt"
ERROR = re.compile(r"^(?P<path>[^:\s][^:]*\.pyi?):\d+(?::\d+)?: error: ")
SUMMARY = re.compile(r"^(?:Found (?P<n>\d+) errors? in \d+ files?|Success: no issues found)")


def strict_prefixes(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """The strict packages as path prefixes (``gymlab.protocol.*`` -> ``gymlab/protocol/``)."""
    overrides = tomllib.loads(pyproject.read_text())["tool"]["mypy"].get("overrides", [])
    modules = [m for o in overrides if o.get("disallow_untyped_defs") for m in o["module"]]
    return [m.removesuffix(".*").replace(".", "/") + "/" for m in modules]


def read_baseline(path: Path = BASELINE) -> int:
    """The recorded error count, the file's one number."""
    text = path.read_text().strip()
    if not text.isdigit():
        raise SystemExit(f"{path.name}: expected one error count (a number), got {text[:80]!r}")
    return int(text)


def judge(output: str, returncode: int, baseline: int, strict: list[str]) -> tuple[int | None, list[str]]:
    """(the error count, what fails): a crash, an error in a strict package, a count over the baseline."""
    errors = [ln for ln in output.splitlines() if ERROR.match(ln)]
    summary = next((m for m in map(SUMMARY.match, output.splitlines()) if m), None)
    if returncode not in (0, 1) or summary is None:
        tail = "\n".join(output.splitlines()[-20:])
        return None, [f"mypy did not finish (exit {returncode}); its last lines:\n{tail}"]
    count = int(summary["n"] or 0)
    if count != len(errors):
        return count, [f"mypy reported {count} errors but printed {len(errors)} error lines"]
    problems = [f"strict package: {ln}" for ln in errors if ln.startswith(tuple(strict))]
    if count > baseline:
        problems.append(
            f"mypy gymlab: {count} errors, over the baseline of {baseline} (tools/mypy_baseline.txt): "
            f"fix the new ones (`.venv/bin/python -m mypy` lists every error)"
        )
    return count, problems


def main(argv: list[str] | None = None) -> int:
    args = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    args.add_argument("--update", action="store_true", help="record the count when it is below the baseline")
    update = args.parse_args(argv).update
    # a baseline is recorded from a whole check: mypy's incremental cache can leave out errors in modules
    # it did not recheck (a count 5 under the truth was recorded so on 2026-12-05)
    fresh = ["--no-incremental"] if update else []
    done = subprocess.run([sys.executable, "-m", "mypy", *fresh], cwd=ROOT, capture_output=True, text=True)
    baseline = read_baseline()
    count, problems = judge(done.stdout + done.stderr, done.returncode, baseline, strict_prefixes())
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems or count is None:
        return 1
    if count < baseline and update:
        BASELINE.write_text(f"{count}\n")
        print(f"mypy gymlab: {count} errors; tools/mypy_baseline.txt lowered from {baseline}: commit it")
    elif count < baseline:
        print(
            f"mypy gymlab: {count} errors, under the baseline of {baseline}: lower it with "
            "`.venv/bin/python tools/mypy_ratchet.py --update` and commit tools/mypy_baseline.txt"
        )
    else:
        print(f"mypy gymlab: {count} errors (baseline {baseline}), none in the strict packages")
    return 0


if __name__ == "__main__":
    sys.exit(main())
