"""Notebooks 01-04 and 02b executed in a real kernel (nbclient); the kernel's variables checked by a probe."""

import os

import nbformat
import pytest

from tests.notebooks.kernel import NOTEBOOKS, html_of, read, run_notebook, text_of

TUTORIALS = sorted(p.name for p in NOTEBOOKS.glob("*.ipynb"))  # every notebook is a tutorial


@pytest.mark.parametrize("name", TUTORIALS)
def test_notebook_reads_as_a_tutorial(name):
    """No cell of test assertions: the checks live here, the notebook only teaches."""
    book = read(name)
    assert book.cells[0].cell_type == "markdown" and book.cells[0].source.startswith("# ")
    for cell in book.cells:
        assert "application/json" not in cell.source, f"{name} displays a JSON cell of checks"


def test_01_quickstart():
    out, outputs = run_notebook(
        "01_quickstart.ipynb",
        """{
            "episodes": len(rollouts),
            "mean_reward": rollouts.mean_reward,
            "tools": sorted(rollouts.steps["tool"].dropna().unique().tolist()),
            "step_rewards_sum": float(rollouts.steps["reward"].sum()),
            "episode_rewards_sum": float(rollouts.episodes["reward"].sum()),
            "columns": list(rollouts.episodes.columns),
            "prefix": __import__("sys").prefix,
        }""",
    )
    demo_venv = os.environ.get("GYMLAB_DEMO_VENV")  # set by `make test`: the kernel is the demo's venv
    if demo_venv:
        assert os.path.realpath(out["prefix"]) == os.path.realpath(demo_venv)
    assert out["episodes"] == 2 * 5 and out["mean_reward"] == 1.0
    assert out["tools"] == ["square"]
    assert out["step_rewards_sum"] == out["episode_rewards_sum"] == 10.0
    assert out["columns"][:4] == ["episode", "task", "repeat", "reward"]
    assert "<b>Rollouts</b>: 10 episodes" in html_of(outputs)  # the rich repr of the run


def test_quickstart_file_is_the_code_of_notebook_01():
    book = nbformat.read(NOTEBOOKS / "01_quickstart.ipynb", as_version=4)
    text = (NOTEBOOKS / "QUICKSTART.md").read_text()
    for cell in book.cells[1:5]:
        assert cell.source in text


def test_02_prototype_environment():
    out, _ = run_notebook(
        "02_prototype_environment.ipynb",
        """{
            "first_reward": first,
            "second_rewards": list(rewards.values()),
            "servers": sorted(lab.servers),
            "new_server_running": env.running,
        }""",
    )
    assert out["first_reward"] == 1.0
    assert out["second_rewards"] == [0.5, 1.0, 0.0]  # the second class answers under the same name
    assert out["servers"] == ["answer"] and out["new_server_running"] is True


def test_02b_your_first_environment():
    """Both servers built from scratch run by hand and by model; the fix, served again under the same name,
    is what the agent made before it reaches."""
    out, outputs = run_notebook(
        "02b_your_first_environment.ipynb",
        """{
            "hint": hint,
            "by_hand": reward,
            "before": [[r.reward, r.mask_sample, r.steps[-1].action[0].type == "message"] for r in before],
            "before_answers": [r.response.output_text for r in before],
            "after": [[r.reward, r.mask_sample, r.failure_kind] for r in after],
            "servers": sorted(lab.servers),
            "games_left": len(env.server.session_state),
            "gym_step": [step.reward, step.terminated, step.info["tool_outputs"][0]["output"]],
            "gym": [[r.reward, r.terminated, [s.reward for s in r.steps]] for r in gym_rollouts],
            "gym_sessions_left": len(table.server.session_state),
            "light": [[r.reward, r.mask_sample] for r in light_rollouts],
            "light_check": lab.check(light, rows).ok,
            "light_left": len(light.server.session_state),
            "probed": __import__("gymlab.probes").probes.probe(lab, env, rows).flagged,
            "gym_probed": __import__("gymlab.probes").probes.probe(lab, table, rows).flagged,
        }""",
    )
    assert out["hint"] == {"hint": "higher", "guesses": 1}  # the bug, seen by hand (50 against 42)
    assert out["by_hand"] == 1.0
    assert [r[:2] for r in out["before"]] == [[0.0, False]] * 3 and out["before_answers"] == ["I give up."] * 3
    assert "guess" in out["servers"] and out["games_left"] == 0  # verify released every game
    assert out["gym_step"] == [-0.1, False, '{"hint": "lower"}']
    for reward, terminated, step_rewards in out["gym"]:
        assert terminated is True and step_rewards[-1] == 1.0 and set(step_rewards[:-1]) == {-0.1}
        assert reward == pytest.approx(sum(step_rewards))
    assert out["gym_sessions_left"] == 0
    assert out["probed"] == [] and out["gym_probed"] == []  # both graders pay the secret alone, nothing else
    assert "Traceback" not in text_of(outputs)
    # the agent made before the fix reaches the fixed server (re-serving a name keeps its URL)
    assert out["after"] == [[1.0, False, None]] * 3, out["after"]
    # the same game from plain functions (gymlab.environment): checked, run and released like the class
    assert out["light"] == [[1.0, False]] * 3 and out["light_check"] is True and out["light_left"] == 0


def test_03_step_through():
    out, outputs = run_notebook(
        "03_step_through.ipynb",
        """{
            "calculator_by_hand": calc_ep.reward,
            "counter_by_model": ep.reward,
            "counter_branch": branch.reward,
            "counter_branch_final": branch.result["final_count"],
            "blackjack_hit": hit.reward,
            "blackjack_stand": stand.reward,
            "async_terminated": step.terminated,
            "blackjack_model_steps": len(game.steps),
            "blackjack_terminated": game.rollout.terminated,
            "sessions_left": len(counter_env.server.session_state) + len(table.server.session_state),
        }""",
    )
    assert "{'result': 16}" in text_of(outputs) and out["calculator_by_hand"] == 1.0
    assert "the model: reward 1; the branch: reward 0, final count 11" in text_of(outputs)
    assert out["counter_by_model"] == 1.0
    assert out["counter_branch"] == 0.0 and out["counter_branch_final"] == 11
    assert out["blackjack_hit"] == -1.0 and out["blackjack_stand"] == 1.0
    assert out["blackjack_model_steps"] == 2 and out["blackjack_terminated"] is True
    assert out["async_terminated"] is True
    assert out["sessions_left"] == 0
    html = html_of(outputs)
    assert "calculator_server</b> (seed/verify, finished)" in html and "blackjack_env</b> (gymnasium, finished)" in html


def test_04_reward_curves():
    out, outputs = run_notebook(
        "04_reward_curves.ipynb",
        """{
            "episodes": {name: len(r) for name, r in runs.items()},
            "repeats": sorted(set(rollouts.episodes["repeat"].tolist())),
            "rewards_match": bool(
                (rollouts.steps.groupby("episode")["reward"].sum().round(9) == rollouts.episodes["reward"].round(9)).all()
            ),
            "figure_axes": [
                len(plots.reward_curve(rollouts.episodes).axes),
                len(plots.compare_runs({n: r.episodes for n, r in runs.items()}).axes),
            ],
            "curve_title": plots.reward_curve(rollouts.episodes).axes[0].get_title(),
            "sample_title": plots.step_rewards(rollouts.steps, episodes=rollouts.episodes, max_episodes=6).axes[0].get_title(),
        }""",
    )
    assert "rolling mean of 6 (one repeat)" in out["curve_title"]
    assert "a sample of 6 of 48 episodes (every task once per repeat, 6 tasks)" in out["sample_title"]
    assert out["episodes"] == {"hit below 17": 8 * 6, "always stand": 8 * 6}
    assert out["repeats"] == list(range(8))
    assert out["rewards_match"] is True
    assert out["figure_axes"] == [1, 1]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    assert len(images) >= 7  # every figure rendered inline
