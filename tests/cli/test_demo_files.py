"""The demo's output files get the user's normal permissions: the mode open() gives under their umask."""

import os
import stat
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_demo_files_follow_the_umask(tmp_path):
    out = tmp_path / "demo"
    subprocess.run(
        [sys.executable, "-m", "gymlab", "demo", "--out", str(out), "--repeats", "1", "--concurrency", "2"],
        check=True,
        capture_output=True,
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        preexec_fn=lambda: os.umask(0o027),  # neither 0600 (mkstemp's) nor 0644 (the usual umask)
        timeout=600,
    )
    files = sorted(out.glob("*.jsonl"))
    assert len(files) == 4
    assert {f.name: stat.S_IMODE(f.stat().st_mode) for f in files} == {f.name: 0o640 for f in files}
    assert not list(out.glob(".*.tmp"))  # no temp file left behind
