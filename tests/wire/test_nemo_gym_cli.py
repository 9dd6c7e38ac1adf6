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
import subprocess

from gymlab import Lab
from gymlab.examples import example_rows, load_environment
from tests.wire.nemo_venv import GYM, MARKS, NEMO_PYTHON, free_port, module_file, nemo_environ, nemo_server, where

pytestmark = MARKS

#: NeMo's relay, its Ray start switched off (a class attribute, not a config field).
RELAY = """
import importlib.util, sys
spec = importlib.util.spec_from_file_location("legacy_agent_app", sys.argv[1])
app = importlib.util.module_from_spec(spec)
spec.loader.exec_module(app)
app.LegacyAgentEnvironmentServer.ray_enabled = False
app.LegacyAgentEnvironmentServer.run_webserver()
"""


def test_gym_eval_run_with_a_gymlab_agent_exits_0(tmp_path):
    counter = load_environment("counter")
    rows = example_rows("counter")
    with Lab(wire=True) as lab:
        env = lab.serve(counter.CounterServer, name="counter")
        model = lab.serve_model(counter.policy, name="policy_model")
        agent = lab.serve_agent("simple_agent", resources=env, model=model, name="counter_simple_agent")
        relay_port = free_port()
        ref = {"type": "responses_api_agents", "name": "counter_simple_agent"}
        config = {
            "head_server": {"host": "127.0.0.1", "port": free_port()},  # never called: the config is injected
            "counter_simple_agent": {
                "responses_api_agents": {"simple_agent": {**where(agent.url), "entrypoint": "app.py"}}
            },
            "counter": {
                "resources_servers": {"counter": {**where(env.url), "entrypoint": "app.py", "domain": "other"}}
            },
            "policy_model": {"responses_api_models": {"policy_model": {**where(model.url), "entrypoint": "app.py"}}},
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
        environ = nemo_environ(config)
        relay = [str(NEMO_PYTHON), "-c", RELAY, module_file("environment_servers.legacy_agent.app")]
        log = tmp_path / "relay.log"
        with nemo_server(
            relay, {**environ, "NEMO_GYM_CONFIG_PATH": "counter_relay"}, f"http://127.0.0.1:{relay_port}", log, tmp_path
        ):
            run = subprocess.run(
                [str(GYM), "eval", "run", "--no-serve"],
                env=environ,
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=600,
            )
    records = [json.loads(line) for line in (tmp_path / "rollouts.jsonl").read_text().splitlines()]
    assert len(records) == len(rows) and all(r["reward"] == 1.0 and not r.get("mask_sample") for r in records)
    assert run.returncode == 0, (
        f"`gym eval run` exited {run.returncode} after writing {len(records)} rollouts:\n"
        f"{run.stderr[-2000:]}\nrelay:\n{log.read_text()[-2000:]}"
    )
    (entry,) = json.loads((tmp_path / "rollouts_aggregate_metrics.json").read_text())  # one per environment server
    assert entry["agent_ref"]["name"] == "counter_simple_agent" and entry["agent_metrics"]
