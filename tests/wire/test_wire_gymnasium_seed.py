"""A Gymnasium server's episode seed leaves ``observation`` out when its reset set none, and keeps
the one it set (the spec: an unset observation is omitted, a set one is returned)."""

from __future__ import annotations

import httpx

from gymlab.examples import example_rows, load_environment


def seed(url: str, sid: str, task_data: dict) -> dict:
    body = {
        "resources_session_id": sid,
        "episode_id": {"rollout_id": sid},
        "task_id": {"task_id": "0"},
        "task_data": task_data,
    }
    reply = httpx.post(f"{url}/seed_session", json=body, timeout=60)
    assert reply.status_code == 200, reply.text
    return reply.json()


def test_episode_seed_omits_an_unset_observation(lab):
    qa = lab.serve(load_environment("qa").QAEnv)  # its reset returns no observation
    row = example_rows("qa")[0]
    assert seed(qa.url, "rs-qa", {k: v for k, v in row.items() if k != "responses_create_params"}) == {
        "resources_session_id": "rs-qa"
    }


def test_episode_seed_keeps_a_set_observation(lab):
    blackjack = lab.serve(load_environment("blackjack").BlackjackEnv)  # its reset deals a hand
    answer = seed(blackjack.url, "rs-bj", {"seed": 0})
    assert answer["resources_session_id"] == "rs-bj" and answer["observation"].startswith("Your hand:")
