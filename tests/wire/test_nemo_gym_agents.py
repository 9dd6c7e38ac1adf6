"""NeMo Gym 0.7.0's own simple_agent and gymnasium_agent drive gymlab's counter and blackjack.

Behind the ``nemo`` marker (``make test-nemo``): NeMo's agents run as they ship, each its own
process in NeMo's venv, configured by ``NEMO_GYM_CONFIG_DICT`` to use a gymlab resources server and
gymlab's rule-based policy as its model server. They keep the session cookie as aiohttp does (a
value holding ``=`` goes back in double quotes). Every row must end graded, unmasked, with the reward
gymlab's own agent of the same name gets on it; the counter with one worker and with two (the worker
router reads the same cookie), and its final count equal to the target (no increment lost or replayed).
``tests/wire/test_wire_nemo_agents.py`` plays the same episodes on the wire in the default suite.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from gymlab import Lab
from gymlab.examples import environment_dir, example_rows, load_environment
from gymlab.testing.workers import serve_entrypoint
from tests.wire.nemo_venv import MARKS, NEMO_PYTHON, free_port, module_file, nemo_environ, nemo_server, where

pytestmark = MARKS

TIMEOUT = 120.0


def _run(agent_url: str, rows: list[dict]) -> list[dict]:
    """Each row's ``/run`` answer (each a 200)."""
    answers = []
    with httpx.Client(timeout=TIMEOUT) as client:
        for row in rows:
            reply = client.post(f"{agent_url}/run", json=row)
            assert reply.status_code == 200, f"{agent_url}/run: {reply.status_code} {reply.text[:2000]}"
            answers.append(reply.json())
    return answers


@contextlib.contextmanager
def nemo_agent(kind: str, env_name: str, env_url: str, model_url: str, tmp_path: Path) -> Iterator[str]:
    """NeMo's ``kind`` agent (``responses_api_agents/<kind>/app.py``) on a free port, bound to the servers."""
    port = free_port()
    config = {
        "head_server": {"host": "127.0.0.1", "port": free_port()},  # never called: the config is injected
        env_name: {"resources_servers": {env_name: {**where(env_url), "entrypoint": "app.py", "domain": "other"}}},
        "policy_model": {"responses_api_models": {"policy_model": {**where(model_url), "entrypoint": "app.py"}}},
        "nemo_agent": {
            "responses_api_agents": {
                kind: {
                    "host": "127.0.0.1",
                    "port": port,
                    "entrypoint": "app.py",
                    "resources_server": {"type": "resources_servers", "name": env_name},
                    "model_server": {"type": "responses_api_models", "name": "policy_model"},
                }
            }
        },
    }
    url = f"http://127.0.0.1:{port}"
    argv = [str(NEMO_PYTHON), module_file(f"responses_api_agents.{kind}.app")]
    with nemo_server(argv, nemo_environ(config, "nemo_agent"), url, tmp_path / f"{kind}.log", tmp_path):
        yield url


def _graded(answers: list[dict]) -> None:
    assert [(a.get("mask_sample", False), a.get("failure_kind")) for a in answers] == [(False, None)] * len(answers)


def play_both(tmp_path: Path, env_name: str, server: str, kind: str, workers: int = 1) -> tuple[list, list, list]:
    """The example rows of ``env_name``, and the answers gymlab's ``kind`` agent and NeMo's get on them
    (NeMo's against ``workers`` workers of the environment's app), each checked graded."""
    module, rows = load_environment(env_name), example_rows(env_name)
    with Lab(wire=True) as lab:
        env = lab.serve(getattr(module, server), name=env_name)
        model = lab.serve_model(module.policy, name="policy_model")
        ours = _run(lab.serve_agent(kind, resources=env, model=model).url, rows)
        with contextlib.ExitStack() as stack:
            env_url = env.url
            if workers > 1:
                env_url = stack.enter_context(serve_entrypoint(environment_dir(env_name) / "app.py", workers)).url
            theirs = _run(stack.enter_context(nemo_agent(kind, env_name, env_url, model.url, tmp_path)), rows)
    _graded(ours)
    _graded(theirs)
    return rows, ours, theirs


@pytest.mark.parametrize("workers", [1, 2])
def test_nemo_simple_agent_drives_the_counter_with_gymlab_rewards(tmp_path, workers):
    rows, ours, theirs = play_both(tmp_path, "counter", "CounterServer", "simple_agent", workers)
    assert [a["reward"] for a in theirs] == [a["reward"] for a in ours] == [1.0] * len(rows)
    assert [a["final_count"] for a in theirs] == [row["target"] for row in rows]


def test_nemo_gymnasium_agent_drives_blackjack_with_gymlab_rewards(tmp_path):
    _, ours, theirs = play_both(tmp_path, "blackjack", "BlackjackEnv", "gymnasium_agent")
    assert [a["reward"] for a in theirs] == [a["reward"] for a in ours]
    assert all(a["terminated"] for a in theirs), theirs  # every hand played to its end
    assert len({a["reward"] for a in ours}) > 1  # the hands differ: won, lost or pushed
