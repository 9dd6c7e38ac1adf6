"""Gymnasium's toy-text envs served by gymlab.envs.gymnasium: a served episode equals a direct loop."""

from __future__ import annotations

import random

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env

from gymlab import envs, function_call
from gymlab.gym_interop import ServedEnv

#: env id -> its action names (as the adapter knows them)
ENVS = {
    "FrozenLake-v1": ["left", "down", "right", "up"],
    "Taxi-v4": ["south", "north", "east", "west", "pickup", "dropoff"],
}


def sequence(names: list[str], seed: int, length: int = 40) -> list[str]:
    """Actions by name, number or tool call, with an unreadable one now and then (a no-op when served)."""
    rng = random.Random(seed)
    out = []
    for _ in range(length):
        i = rng.randrange(len(names))
        out.append(rng.choice([names[i], f"I go {names[i].upper()}.", str(i), f"call:{names[i]}", "dance!"]))
    return out


def scripted(actions: list[str]):
    """A policy playing ``actions`` in order (the n-th model turn plays the n-th)."""

    def policy(request):
        items = request.input_items()
        turn = sum(1 for i in items if i.type == "function_call" or getattr(i, "role", None) == "assistant")
        action = actions[min(turn, len(actions) - 1)]
        return [function_call(action[5:], {})] if action.startswith("call:") else action

    return policy


def direct(env_id: str, seed: int, actions: list[str], names: list[str]) -> list[tuple[float, bool, bool]]:
    """The same episode played on Gymnasium alone: (reward, terminated, truncated) per readable action."""
    env = gymnasium.make(env_id)
    env.reset(seed=seed)
    out = []
    for action in actions:
        word = action.removeprefix("call:").removeprefix("I go ").rstrip(".").lower()
        index = names.index(word) if word in names else int(word) if word.isdigit() else None
        if index is None:
            out.append((0.0, False, False))  # the served env's no-op
            continue
        _, reward, terminated, truncated, _ = env.step(index)
        out.append((float(reward), terminated, truncated))
        if terminated or truncated:
            break
    return out


@pytest.mark.parametrize("env_id", ENVS)
def test_served_episodes_equal_a_direct_loop(lab, env_id):
    names = ENVS[env_id]
    server, rows = envs.gymnasium(env_id, seeds=range(6), tools=True)
    assert [r["seed"] for r in rows] == list(range(6))
    assert {t["name"] for t in rows[0]["responses_create_params"]["tools"]} == set(names)
    env = lab.serve(server)
    for row in rows:
        actions = sequence(names, row["seed"])
        model = lab.serve_model(scripted(actions), name="script")
        agent = lab.serve_agent("gymnasium_agent", resources=env, model=model, name="agent", max_steps=len(actions))
        record = agent.run(row)
        assert not record.mask_sample, record.failure_reason
        served = [(s.reward, s.terminated, s.truncated) for s in record.steps]
        reference = direct(env_id, row["seed"], actions, names)
        if len(reference) == len(actions) and not reference[-1][1]:  # the agent's step limit cut it
            reference[-1] = (*reference[-1][:2], True)
        assert served == reference
        assert record.reward == sum(r for r, _, _ in served)
        unreadable = [s for s in record.steps if "unreadable_action" in s.info]
        assert len(unreadable) == sum(1 for a in actions[: len(served)] if a == "dance!")
    assert server.session_state == {}


def test_the_observation_is_text_with_the_position_marked(lab):
    server, rows = envs.gymnasium("FrozenLake-v1", seeds=[3])
    env = lab.serve(server)
    wrapped = ServedEnv(env, rows[0], max_observation_length=2048)
    observation, _ = wrapped.reset(seed=3)
    assert observation.splitlines()[0] == "[S]FFF" and observation.endswith("observation: 0")
    observation, *_ = wrapped.step("right")
    assert "\x1b" not in observation and "observation: " in observation
    wrapped.close()


@pytest.mark.parametrize("env_id", ENVS)
def test_the_served_env_wrapped_back_passes_check_env(lab, env_id):
    server, rows = envs.gymnasium(env_id, seeds=[0])
    env = lab.serve(server)
    wrapped = ServedEnv(env, rows[0], max_observation_length=4096)
    check_env(wrapped)  # random text actions: unreadable ones are no-ops, seeded resets replay
    wrapped.close()
    assert server.session_state == {}


def test_an_env_instance_and_a_formatter(lab):
    """An env object (each episode a copy of it) and your own observation text; CartPole has no ansi render."""
    server, rows = envs.gymnasium(
        gymnasium.make("CartPole-v1"), seeds=[5], formatter=lambda env, obs: f"pole angle {obs[2]:.3f}"
    )
    env = lab.serve(server)
    wrapped = ServedEnv(env, rows[0])
    observation, _ = wrapped.reset(seed=5)
    reference = gymnasium.make("CartPole-v1")
    obs, _ = reference.reset(seed=5)
    assert observation == f"pole angle {obs[2]:.3f}"
    total, done = 0.0, False
    while not done:
        observation, reward, terminated, truncated, _ = wrapped.step("right")
        obs, ref_reward, ref_terminated, ref_truncated, _ = reference.step(1)
        assert (observation, reward, terminated, truncated) == (
            f"pole angle {obs[2]:.3f}",
            ref_reward,
            ref_terminated,
            ref_truncated,
        )
        total, done = total + reward, terminated or truncated
    assert total > 0
    wrapped.close()


def test_unreadable_and_hostile_actions_change_nothing(lab):
    server, rows = envs.gymnasium("FrozenLake-v1", seeds=[1])
    env = lab.serve(server)
    wrapped = ServedEnv(env, rows[0], max_observation_length=2048, action_mode="function_call")
    start, _ = wrapped.reset(seed=1)
    for action in [
        'act {"action": 99}',
        'act {"action": -1}',
        "act not json",
        "left_or_right {}",
        'act {"action": true}',
    ]:
        observation, reward, terminated, truncated, info = wrapped.step(action)
        assert (observation, reward, terminated, truncated) == (start, 0.0, False, False)
        assert "unreadable_action" in info
    observation, *_ = wrapped.step('act {"action": 2}')
    assert observation != start
    wrapped.close()


def test_not_an_env_is_refused():
    with pytest.raises(TypeError, match="an env id or a gymnasium.Env"):
        envs.gymnasium(object())


def test_a_step_without_an_episode_is_masked_session_lost(lab):
    import httpx

    server, rows = envs.gymnasium("FrozenLake-v1", seeds=[1])
    env = lab.serve(server)
    body = {**rows[0], "response": {"output": [{"type": "message", "role": "assistant", "content": "left"}]}}
    for _ in range(2):  # repeated: the same answer
        answer = httpx.post(f"{env.url}/step", json=body, timeout=30).json()
        assert answer["mask_sample"] and answer["failure_kind"] == "session_lost" and answer["truncated"]


def test_bad_seeds_and_options_are_4xx(lab):
    import httpx

    server, rows = envs.gymnasium("FrozenLake-v1", seeds=[1])
    game, game_rows = envs.textarena("TowerOfHanoi-v0", seeds=[1])
    for handle, row in ((lab.serve(server), rows[0]), (lab.serve(game), game_rows[0])):
        for change in ({"seed": -5}, {"seed": "abc"}, {"seed": 1.5}, {"seed": True}):
            answer = httpx.post(f"{handle.url}/reset", json={**row, **change}, timeout=30)
            assert answer.status_code == 422 and "seed must be a whole number" in answer.text, answer.text
    answer = httpx.post(f"{lab.serve(server).url}/reset", json={**rows[0], "options": "x"}, timeout=30)
    assert answer.status_code == 422 and "options must be an object" in answer.text
    cartpole, cartpole_rows = envs.gymnasium("CartPole-v1", seeds=[0])
    url = lab.serve(cartpole).url
    for options in ({"low": "x"}, {"low": 10**400}, {"low": [1]}):  # refused by the env's own reset
        answer = httpx.post(f"{url}/reset", json={**cartpole_rows[0], "options": options}, timeout=30)
        assert answer.status_code == 422 and "refused the reset options" in answer.text, answer.text[:300]
    assert cartpole.session_state == {}
