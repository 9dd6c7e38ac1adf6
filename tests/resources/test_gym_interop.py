"""Gymnasium's own checkers on gymlab's Env adapter: a served GymnasiumServer session and in-process."""

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env
from gymnasium.utils.env_match import check_environments_match

from gymlab.examples import example_rows, load_environment
from gymlab.gym_interop import IN_PROCESS_ID, SERVED_ID, InProcessEnv, ServedEnv


@pytest.fixture
def blackjack():
    return load_environment("blackjack")


@pytest.fixture
def served(lab, blackjack):
    return lab.serve(blackjack.BlackjackEnv)


@pytest.mark.parametrize("action_mode", ["text", "function_call"])
def test_check_env_passes_on_a_served_session(served, action_mode):
    env = gymnasium.make(SERVED_ID, server=served.url, row=example_rows("blackjack")[0], action_mode=action_mode)
    check_env(env.unwrapped)
    env.close()
    assert served.server.session_state == {}


def test_check_env_passes_in_process(blackjack):
    env = gymnasium.make(IN_PROCESS_ID, server=blackjack.BlackjackEnv, row=example_rows("blackjack")[0])
    check_env(env.unwrapped)
    env.close()


@pytest.mark.parametrize("action_mode", ["text", "function_call"])
def test_served_env_matches_the_in_process_env(served, blackjack, action_mode):
    row = example_rows("blackjack")[0]
    a = ServedEnv(served, row, action_mode=action_mode)
    b = InProcessEnv(blackjack.BlackjackEnv, row, action_mode=action_mode)
    # random actions: invalid moves, penalties and truncation at max_turns, then resets
    check_environments_match(a, b, num_steps=30, seed=7)
    a.close(), b.close()
    assert served.server.session_state == {} and b.server.session_state == {}


def test_real_moves_match_and_replay_from_the_seed(served, blackjack):
    row = example_rows("blackjack")[0]
    envs = ServedEnv(served, row), InProcessEnv(blackjack.BlackjackEnv, row)
    traces = []
    for env in (*envs, envs[0]):
        obs, info = env.reset(seed=11)
        trace = [(obs, info)]
        done = False
        while not done:
            move = "hit" if int(obs.split("total ")[1].split(")")[0]) < 17 else "stand"
            obs, reward, terminated, truncated, info = env.step(move)
            trace.append((obs, reward, terminated, truncated, info))
            done = terminated or truncated
        traces.append(trace)
    assert traces[0] == traces[1] == traces[2]
    assert traces[0][-1][2] and traces[0][-1][4]["outcome"] in ("win", "loss", "push", "bust")
    assert served.server.session_state == {}


def test_function_call_actions_return_tool_outputs(served):
    env = ServedEnv(served, example_rows("blackjack")[0], action_mode="function_call")
    env.reset(seed=3)
    obs, reward, terminated, truncated, info = env.step("stand {}")
    assert terminated and info["tool_outputs"][0]["call_id"] == "call_0"
    assert '"outcome"' in info["tool_outputs"][0]["output"]


def test_close_releases_a_live_episode(served):
    env = ServedEnv(served, example_rows("blackjack")[0])
    env.reset(seed=1)
    assert len(served.server.session_state) == 1
    env.close()
    env.close()  # closing twice is allowed
    assert served.server.session_state == {}
    with pytest.raises(RuntimeError, match="is closed; make a new one"):
        env.reset()


def test_observation_outside_the_charset_is_refused(served):
    env = ServedEnv(served, example_rows("blackjack")[0], charset="abc")
    with pytest.raises(ValueError, match="characters outside the charset"):
        env.reset(seed=0)
    env.close()


def test_missing_gymnasium_names_the_extra(tmp_path):
    import subprocess
    import sys

    blocker = tmp_path / "gymnasium.py"
    blocker.write_text("raise ImportError('blocked for this test')\n")
    code = "import gymlab.gym_interop"
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(tmp_path), "PATH": ""},
        timeout=180,
    )
    assert proc.returncode != 0 and "pip install gymlab[gymnasium]" in proc.stderr


def test_import_gymlab_does_not_import_gymnasium():
    import subprocess
    import sys

    code = "import sys, gymlab; gymlab.GymnasiumServer; gymlab.GymnasiumAgent; gymlab.failure_kinds; print('gymnasium' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180)
    assert out.stdout.strip() == "False", out.stderr
