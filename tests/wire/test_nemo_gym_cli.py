"""NeMo Gym 0.7.0's own collection CLI (``gym eval run``) drives gymlab's agent to its last step.

Behind the ``nemo`` marker: NeMo Gym 0.7.0 runs in its own venv (Python 3.13), ``make test-nemo``
makes it (``.venv-nemo``, or the one ``NEMO_VENV`` names) and runs these tests. The chain is NeMo's
as it ships: ``gym eval run --no-serve`` posts each row to NeMo's ``legacy_agent`` environment server
(a relay, its own process), which posts ``/run`` to a gymlab ``simple_agent`` served on 127.0.0.1
(with gymlab's counter resources server and policy model), and at the end ``/aggregate_metrics``.
Both NeMo processes get their whole config from ``NEMO_GYM_CONFIG_DICT`` (no head server); the
relay runs with Ray off (``ray_enabled = False`` on its class), so it never joins a Ray cluster.

By hand (the venv as ``make test-nemo`` makes it):
    NEMO_VENV=.venv-nemo python -m pytest -m nemo tests/wire/test_nemo_gym_cli.py
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path

import httpx
import pytest

from gymlab import Lab
from gymlab.examples import example_rows, load_environment

REPO = Path(__file__).resolve().parents[2]
NEMO_VENV = Path(os.environ.get("NEMO_VENV") or REPO / ".venv-nemo")
NEMO_PYTHON, GYM = NEMO_VENV / "bin" / "python", NEMO_VENV / "bin" / "gym"

pytestmark = [
    pytest.mark.nemo,
    pytest.mark.skipif(
        not GYM.exists(),
        reason=f"NeMo Gym 0.7.0 is not installed in {NEMO_VENV} (`make test-nemo` installs it and runs these tests)",
    ),
]

#: NeMo's relay, its Ray start switched off (a class attribute, not a config field).
RELAY = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("legacy_agent_app", sys.argv[1])
app = importlib.util.module_from_spec(spec)
spec.loader.exec_module(app)
app.LegacyAgentEnvironmentServer.ray_enabled = False
app.LegacyAgentEnvironmentServer.run_webserver()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _where(url: str) -> dict:
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    return {"host": host, "port": int(port)}


def _relay_app() -> str:
    out = subprocess.run(
        [str(NEMO_PYTHON), "-c", "import environment_servers.legacy_agent.app as m; print(m.__file__)"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return out.stdout.strip()


def _wait_healthy(url: str, relay: subprocess.Popen, log: Path, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if relay.poll() is not None:
            raise AssertionError(f"NeMo's relay exited with {relay.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)  # polling a condition: the relay is a separate process with no readiness signal
    raise AssertionError(f"NeMo's relay did not answer /health within {timeout}s:\n{log.read_text()[-3000:]}")


def test_gym_eval_run_with_a_gymlab_agent_exits_0(tmp_path):
    counter = load_environment("counter")
    rows = example_rows("counter")
    with Lab(wire=True) as lab:
        env = lab.serve(counter.CounterServer, name="counter")
        model = lab.serve_model(counter.policy, name="policy_model")
        agent = lab.serve_agent("simple_agent", resources=env, model=model, name="counter_simple_agent")
        relay_port = _free_port()
        ref = {"type": "responses_api_agents", "name": "counter_simple_agent"}
        config = {
            "dry_run": False,
            "head_server": {"host": "127.0.0.1", "port": _free_port()},  # never called: the config is injected
            "counter_simple_agent": {
                "responses_api_agents": {"simple_agent": {**_where(agent.url), "entrypoint": "app.py"}}
            },
            "counter": {
                "resources_servers": {"counter": {**_where(env.url), "entrypoint": "app.py", "domain": "other"}}
            },
            "policy_model": {"responses_api_models": {"policy_model": {**_where(model.url), "entrypoint": "app.py"}}},
            "counter_relay": {
                "environment_servers": {
                    "legacy_agent": {
                        "host": "127.0.0.1",
                        "port": relay_port,
                        "entrypoint": "app.py",
                        "agent_server": ref,
                    }
                }
            },
            "agent_name": "counter_simple_agent",
            "input_jsonl_fpath": str(tmp_path / "rows.jsonl"),
            "output_jsonl_fpath": str(tmp_path / "rollouts.jsonl"),
        }
        (tmp_path / "rows.jsonl").write_text("".join(json.dumps({**r, "agent_ref": ref}) + "\n" for r in rows))
        environ = {**os.environ, "NEMO_GYM_CONFIG_DICT": json.dumps(config)}
        environ.pop("PYTHONPATH", None)
        log = tmp_path / "relay.log"
        with log.open("w") as out:
            relay = subprocess.Popen(
                [str(NEMO_PYTHON), "-c", RELAY, _relay_app()],
                env={**environ, "NEMO_GYM_CONFIG_PATH": "counter_relay"},
                cwd=tmp_path,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            _wait_healthy(f"http://127.0.0.1:{relay_port}", relay, log)
            run = subprocess.run(
                [str(GYM), "eval", "run", "--no-serve"],
                env=environ,
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=600,
            )
        finally:
            relay.terminate()
            try:
                relay.wait(timeout=30)
            except subprocess.TimeoutExpired:
                relay.kill()
                relay.wait(timeout=30)
    records = [json.loads(line) for line in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    assert len(records) == len(rows) and all(r["reward"] == 1.0 and not r.get("mask_sample") for r in records)
    assert run.returncode == 0, (
        f"`gym eval run` exited {run.returncode} after writing {len(records)} rollouts:\n"
        f"{run.stderr[-2000:]}\nrelay:\n{log.read_text()[-2000:]}"
    )
    (entry,) = json.loads((tmp_path / "rollouts_aggregate_metrics.json").read_text())  # one per environment server
    assert entry["agent_ref"]["name"] == "counter_simple_agent" and entry["agent_metrics"]
