"""``gymlab.collect`` of a config served in this process (a Lab) prints one line for the errors its
servers logged, as ``run_many`` prints one summary: not one line per failed episode."""

from __future__ import annotations

from pathlib import Path

import gymlab

ROOT = Path(__file__).resolve().parents[2]


def test_collect_in_a_lab_prints_one_line_for_its_failed_episodes(tmp_path, capfd):
    (tmp_path / "down.py").write_text("def policy(request):\n    raise RuntimeError('model is down')\n")
    calculator = ROOT / "environments" / "calculator"
    config = (calculator / "configs" / "calculator.yaml").read_text()
    config = config.replace("../app.py:policy", str(tmp_path / "down.py") + ":policy")
    config = config.replace("../app.py", str(calculator / "app.py")).replace("../data", str(calculator / "data"))
    (tmp_path / "down.yaml").write_text(config)
    result = gymlab.collect(tmp_path / "down.yaml", tmp_path / "run.jsonl", progress=False, max_retries=0)
    assert (result.n_rollouts, result.n_failures) == (0, 5)
    lines = [line for line in capfd.readouterr().err.splitlines() if line.startswith("gymlab")]
    assert len(lines) == 1, lines
    assert "the servers logged" in lines[0] and "model is down" in lines[0]
