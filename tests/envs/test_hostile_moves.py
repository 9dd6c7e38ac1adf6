"""The adapters under what a degenerate model writes: deep or huge arguments, a 1 MB number, many held games,
and a rule opponent's random draws replayed for the same seed."""

from __future__ import annotations

import random

import httpx
import pytest

pytest.importorskip("textarena")
pytest.importorskip("reasoning_gym")
gymnasium = pytest.importorskip("gymnasium")

from gymlab import envs  # noqa: E402

DEEP = "[" * 50_000 + "]" * 50_000


def deep_call(name: str = "move") -> dict:
    return {"type": "function_call", "name": name, "arguments": DEEP, "call_id": "c1"}


def said(text: str) -> dict:
    return {"output": [{"type": "message", "role": "assistant", "content": text}]}


def open_episode(lab, server, rows) -> httpx.Client:
    client = httpx.Client(base_url=lab.serve(server).url, timeout=60)
    assert client.post("/reset", json=rows[0]).status_code == 200
    return client


STEPPED = {
    "textarena-1p": lambda: envs.textarena("GuessTheNumber-v0", tools=True),
    "textarena-2p": lambda: envs.textarena("TicTacToe-v0", num_players=2, opponent=lambda seen: "[4]", tools=True),
    "gymnasium-id": lambda: envs.gymnasium("FrozenLake-v1", tools=True),
    "gymnasium-env": lambda: envs.gymnasium(gymnasium.make("CliffWalking-v1"), tools=True),
}


@pytest.mark.parametrize("name", STEPPED)
def test_deeply_nested_arguments_are_an_unreadable_move(lab, name):
    server, rows = STEPPED[name]()
    client = open_episode(lab, server, rows)
    answer = client.post("/step", json={**rows[0], "response": {"output": [deep_call()]}})
    assert answer.status_code == 200, answer.text[:300]
    step = answer.json()
    assert not step["mask_sample"] and step["reward"] == 0.0, step
    if name.startswith("gymnasium"):
        assert step["info"]["unreadable_action"] == "move" and not step["terminated"]
    else:
        assert "Invalid move" in step["observation"] and "characters" in step["observation"]
        assert len(answer.content) < 20_000  # the move is not echoed back whole


def test_deeply_nested_text_on_a_continuous_env_is_an_unreadable_action(lab):
    """A Box action is read from the text as JSON: nested past the reader, it is unreadable (a no-op), not a 500."""
    server, rows = envs.gymnasium("Pendulum-v1", seeds=[0])
    client = open_episode(lab, server, rows)
    answer = client.post("/step", json={**rows[0], "response": said(DEEP)})
    assert answer.status_code == 200, answer.text[:300]
    step = answer.json()
    assert "unreadable_action" in step["info"] and not step["mask_sample"] and step["reward"] == 0.0, step
    act = {"type": "function_call", "name": "act", "arguments": '{"action": [0.5]}', "call_id": "c2"}
    assert client.post("/step", json={**rows[0], "response": {"output": [act]}}).json()["reward"] < 0  # it goes on


def test_deeply_nested_arguments_are_graded_by_reasoning_gym(lab):
    server, rows = envs.reasoning_gym("chain_sum", size=1, seed=0)
    url = lab.serve(server).url
    answer = httpx.post(f"{url}/verify", json={**rows[0], "response": {"output": [deep_call()]}}, timeout=60)
    assert answer.status_code == 200 and answer.json()["reward"] == 0.0 and not answer.json().get("mask_sample")


@pytest.mark.parametrize("max_move_chars", [None, 2_000_000])
def test_a_megabyte_number_is_an_invalid_move(lab, max_move_chars):
    """Past ``max_move_chars`` the game never sees it; under it, the game's own ``int()`` fails on it."""
    server, rows = envs.textarena("GuessTheNumber-v0")
    if max_move_chars:
        server.max_move_chars = server.max_game_chars = max_move_chars
    client = open_episode(lab, server, rows)
    answer = client.post("/step", json={**rows[0], "response": said("[" + "9" * 1_000_000 + "]")})
    assert answer.status_code == 200, answer.text[:300]
    step = answer.json()
    assert not step["mask_sample"] and "Invalid move" in step["observation"], step["observation"][:300]
    assert ("could not read the move" in step["observation"]) == bool(max_move_chars)
    assert len(answer.content) < 20_000 or max_move_chars  # echoed only up to max_move_chars
    # the game goes on: a readable move is judged as usual
    assert client.post("/step", json={**rows[0], "response": said("[10]")}).json()["reward"] == 0.0


def test_held_games_are_capped_by_count_and_characters(lab):
    server, rows = envs.textarena("GuessTheNumber-v0", seeds=range(3))
    server.max_games, server.max_game_chars = 2, 10
    url = lab.serve(server).url
    clients = [httpx.Client(base_url=url, timeout=60) for _ in range(3)]
    assert [c.post("/reset", json=r).status_code for c, r in zip(clients[:2], rows)] == [200, 200]
    refused = clients[2].post("/reset", json=rows[2])
    assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
    assert "max_games" in refused.text and server.name in refused.text
    assert len(server.session_state) == 2
    # a game holds at most max_game_chars of moves: the move past them is invalid, not stored
    first = clients[0].post("/step", json={**rows[0], "response": said("[10] [10]")}).json()
    assert "Invalid move" not in first["observation"]
    second = clients[0].post("/step", json={**rows[0], "response": said("[11] [11]")}).json()
    assert "would pass the 10 characters" in second["observation"]
    assert server.session_state[next(iter(server.session_state))]["chars"] == 9
    # an ended game frees its place
    assert clients[1].post("/close").json()["closed"] is True
    assert clients[2].post("/reset", json=rows[2]).status_code == 200


def test_a_rule_opponent_drawing_from_random_replays_for_the_same_seed(lab):
    def opponent(seen: str) -> str:
        return f"[{random.randint(0, 8)}]"  # invalid on a taken cell: the game judges it

    server, rows = envs.textarena("TicTacToe-v0", num_players=2, opponent=opponent, seeds=[7])
    url = lab.serve(server).url

    def play(global_seed: int) -> list:
        random.seed(global_seed)  # the process's own random state differs between the two runs
        client = httpx.Client(base_url=url, timeout=60)
        client.post("/reset", json=rows[0])
        moves = []
        for cell in range(9):
            step = client.post("/step", json={**rows[0], "response": said(f"[{cell}]")}).json()
            moves.append([m["action"] for m in step["info"].get("moves", [])])
            if step["terminated"] or step["truncated"]:
                break
        client.post("/close")
        return moves

    first = play(1)
    assert len(first) > 1 and any(len(m) > 1 for m in first), first
    assert play(2) == first
