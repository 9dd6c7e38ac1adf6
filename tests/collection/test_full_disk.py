"""A full disk during ``gymlab collect`` or an export: one clear line, nothing half-written.

The disk is made "full" for real: the subprocess runs with ``RLIMIT_FSIZE`` (and SIGXFSZ ignored), so
a write past the limit fails with the kernel's EFBIG, as a full or quota-limited disk does.
"""

from __future__ import annotations

import json
import resource
import signal
import subprocess
import sys

from gymlab.examples import environment_dir

LIMIT = 6000  # bytes a file may grow to in the limited process


def _limited():
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT, LIMIT))


def test_collect_to_a_full_disk_prints_one_line_and_leaves_whole_lines(tmp_path):
    config = environment_dir("calculator") / "configs" / "calculator.yaml"
    out = tmp_path / "run.jsonl"
    proc = subprocess.run(
        [sys.executable, "-m", "gymlab.cli", "collect", str(config), "-o", str(out), "-n", "8", "--no-progress"],
        capture_output=True,
        text=True,
        timeout=180,
        preexec_fn=_limited,
    )
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, proc.stderr
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert lines[0].startswith("gymlab collect: error: cannot write ") and str(tmp_path) in lines[0]
    assert "File too large" in lines[0] and "free space on that disk" in lines[0]
    for path in tmp_path.iterdir():  # every file there is whole: complete JSON lines, no temp files
        assert not path.name.startswith("."), f"temp file left: {path.name}"
        if path.suffix == ".jsonl":
            text = path.read_text()
            assert text == "" or text.endswith("\n")
            assert all(json.loads(line) for line in text.splitlines())
    # with room again, the same command resumes and finishes
    again = subprocess.run(
        [sys.executable, "-m", "gymlab.cli", "collect", str(config), "-o", str(out), "-n", "8", "--no-progress"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert again.returncode == 0, again.stderr
    assert len(out.read_text().splitlines()) == 8 * len(
        (environment_dir("calculator") / "data" / "example.jsonl").read_text().splitlines()
    )


EXPORT = """
import gymlab, sys
rollouts = gymlab.load(sys.argv[1])
gymlab.export_sft(rollouts, sys.argv[2])
"""


def test_an_export_to_a_full_disk_raises_one_clear_error_and_writes_nothing(tmp_path, lab):
    from gymlab.examples import example_rows, load_environment

    calculator = load_environment("calculator")
    agent = lab.serve_agent(
        "simple_agent", resources=lab.serve(calculator.CalculatorServer), model=lab.serve_model(calculator.policy)
    )
    source = lab.run_many(agent, example_rows("calculator"), repeats=8).save(tmp_path / "rollouts.jsonl")
    target = tmp_path / "out" / "sft.jsonl"
    proc = subprocess.run(
        [sys.executable, "-c", EXPORT, str(source), str(target)],
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limited,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1].startswith(f"gymlab.errors.PersistenceError: cannot write {target}")
    assert not target.exists() and list(target.parent.iterdir()) == []
