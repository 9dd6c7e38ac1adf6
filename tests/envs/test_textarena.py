"""TextArena games through gymnasium_agent: a one-player game and a two-player game played to the end."""

from __future__ import annotations

import re

import httpx
import pytest

pytest.importorskip("textarena")

import textarena as ta  # noqa: E402

from gymlab import envs, function_call  # noqa: E402

HANOI = ["[A C]", "[A B]", "[C B]", "[A C]", "[B A]", "[B C]", "[A C]"]


def turns(request) -> int:
    return sum(1 for i in request.input_items() if i.type == "function_call" or getattr(i, "role", None) == "assistant")


def last_user(request) -> str:
    return [i.text for i in request.input_items() if i.type == "message" and i.role == "user"][-1]


def available(text: str) -> list[str]:
    found = re.findall(r"Available Moves: (.*)", text)
    return re.findall(r"\[\d\]", found[-1]) if found else []


def first_free(text: str) -> str:
    return available(text)[0]


def last_free(text: str) -> str:
    return available(text)[-1]


@pytest.mark.parametrize("tools", [False, True])
def test_tower_of_hanoi_solved_to_the_end(lab, tools):
    server, rows = envs.textarena("TowerOfHanoi-v0", seeds=[0, 1], tools=tools)
    env = lab.serve(server)

    def solver(request):
        move = HANOI[turns(request)]
        return [function_call("move", {"action": move})] if tools else f"I move {move}"

    agent = lab.serve_agent("gymnasium_agent", resources=env, model=lab.serve_model(solver), max_steps=20)
    rollouts = lab.run_many(agent, rows)
    for record in rollouts:
        assert not record.mask_sample, record.failure_reason
        assert record.terminated and record.reward == 1.0 and len(record.steps) == 7
        assert record.steps[-1].info["rewards"] == {"0": 1.0}
        assert "A: [3, 2, 1]" in record.responses_create_params.input_items()[-1].text  # the first board
        assert [s.info["moves"][0]["action"] for s in record.steps] == (
            [*HANOI] if tools else [f"I move {m}" for m in HANOI]
        )
    assert server.session_state == {}


def test_guess_the_number_by_bisection_equals_a_direct_game(lab):
    server, rows = envs.textarena("GuessTheNumber-v0", seeds=[3, 4, 5])
    env = lab.serve(server)

    def bisect(history: list[str]) -> int:
        low, high = 1, 20
        for text in history:
            last = re.findall(r"\[(\d+)\]", text)
            if last and "higher" in text:
                low = int(last[-1]) + 1
            elif last and "lower" in text:
                high = int(last[-1]) - 1
        return (low + high) // 2

    def policy(request):
        items = request.input_items()
        # pair each of our guesses with the hint that followed it
        history, guess = [], None
        for i in items:
            if getattr(i, "role", None) == "assistant":
                guess = i.text
            elif getattr(i, "role", None) == "user" and guess is not None:
                history.append(f"{guess} {i.text}")
        return f"[{bisect(history)}]"

    agent = lab.serve_agent("gymnasium_agent", resources=env, model=lab.serve_model(policy), max_steps=12)
    for row in rows:
        record = agent.run(row)
        game = ta.make("GuessTheNumber-v0")
        game.reset(num_players=1, seed=row["seed"])
        game.env.env.state.observations[0] = []  # the rules, which the served episode's reset showed
        history, done = [], False
        while not done:
            guess = f"[{bisect(history)}]"
            done, _ = game.step(guess)
            hint = " ".join(m for _, m, _ in game.env.env.state.observations[0] if isinstance(m, str))
            game.env.env.state.observations[0] = []
            history.append(f"{guess} {hint}")
        rewards, _ = game.close()
        assert record.reward == rewards[0] == 1.0
        assert [s.info["moves"][-1]["action"] for s in record.steps] == [h.split(" ")[0] for h in history]


def play_direct(seed: int) -> tuple[list[str], dict]:
    """TicTacToe on TextArena alone: seat 0 takes the first free cell, seat 1 the last."""
    game = ta.make("TicTacToe-v0")
    game.reset(num_players=2, seed=seed)
    moves, done = [], False
    while not done:
        seat, text = game.get_observation()  # TextArena's own loop: the seat's whole history as text
        move = first_free(text) if seat == 0 else last_free(text)
        moves.append(move)
        done, _ = game.step(move)
    rewards, _ = game.close()
    return moves, {str(k): float(v) for k, v in rewards.items()}


@pytest.mark.parametrize("opponent_kind", ["rule", "model"])
def test_tic_tac_toe_two_players_to_the_end(lab, opponent_kind):
    opponent = (
        last_free
        if opponent_kind == "rule"
        else lab.serve_model(lambda request: last_free(last_user(request)), name="opponent")
    )
    server, rows = envs.textarena("TicTacToe-v0", seeds=[0, 7], num_players=2, opponent=opponent)
    env = lab.serve(server)
    model = lab.serve_model(lambda request: first_free(last_user(request)))
    agent = lab.serve_agent("gymnasium_agent", resources=env, model=model, max_steps=9)
    for row in rows:
        record = agent.run(row)
        assert not record.mask_sample, record.failure_reason
        moves = [m for s in record.steps for m in s.info["moves"]]
        assert [m["player"] for m in moves] == [i % 2 for i in range(len(moves))]
        expected_moves, rewards = play_direct(row["seed"])
        assert [m["action"] for m in moves] == expected_moves
        assert record.terminated and record.steps[-1].info["rewards"] == rewards
        assert record.reward == rewards["0"] and sum(rewards.values()) == 0
        assert all(m["observation"] for m in moves if m["player"] == 1)  # the opponent's view is kept
    assert server.session_state == {}


def test_the_model_as_the_second_seat(lab):
    server, rows = envs.textarena("TicTacToe-v0", seeds=[2], num_players=2, player=1, opponent=first_free)
    env = lab.serve(server)
    agent = lab.serve_agent(
        "gymnasium_agent", resources=env, model=lab.serve_model(lambda r: last_free(last_user(r))), max_steps=9
    )
    record = agent.run(rows[0])
    moves, rewards = play_direct(2)
    played = [m for s in record.steps for m in s.info["moves"]]
    assert [m["action"] for m in played] == moves and [m["player"] for m in played][:2] == [0, 1]
    assert record.reward == rewards["1"]


def test_invalid_moves_are_the_games_to_judge(lab):
    server, rows = envs.textarena("TowerOfHanoi-v0", seeds=[0])
    env = lab.serve(server)
    agent = lab.serve_agent("gymnasium_agent", resources=env, model=lab.serve_model(lambda r: "no idea"), max_steps=5)
    record = agent.run(rows[0])
    assert not record.mask_sample and record.terminated
    assert record.steps[-1].info["rewards"] == {"0": record.reward}
    assert "invalid" in record.steps[0].observation.lower()


def test_a_two_player_game_without_an_opponent_is_a_4xx(lab):
    server, rows = envs.textarena("TicTacToe-v0", seeds=[0], num_players=2)
    env = lab.serve(server)
    answer = httpx.post(f"{env.url}/reset", json=rows[0], timeout=30)
    assert answer.status_code == 422 and "give opponent or opponent_model" in answer.text


def test_games_that_need_what_is_not_here_say_what(monkeypatch, tmp_path):
    import nltk

    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
    with pytest.raises(RuntimeError, match=r"needs NLTK data words.*nltk.downloader words"):
        envs.textarena("Hangman-v0")
    with pytest.raises(RuntimeError, match="OPENROUTER_API_KEY"):
        envs.textarena("GuessWho-v0")
    with pytest.raises(LookupError, match="no TextArena game 'TicTacToe-v9'.*TicTacToe-v0"):
        envs.textarena("TicTacToe-v9")


def test_episodes_keep_their_own_random_state(lab):
    """Two games stepped in turn replay as alone, and the process's random is left as it was."""
    import random

    server, rows = envs.textarena("GuessTheNumber-v0", seeds=[3, 3])
    env = lab.serve(server)
    random.seed(99)
    before = random.random()
    random.seed(99)
    with httpx.Client(base_url=env.url, timeout=30) as a, httpx.Client(base_url=env.url, timeout=30) as b:
        first = [c.post("/reset", json=row).json()["observation"] for c, row in ((a, rows[0]), (b, rows[1]))]
        say = {"output": [{"type": "message", "role": "assistant", "content": "[10]"}]}
        hints = [c.post("/step", json={**rows[0], "response": say}).json()["observation"] for c in (a, b)]
    assert first[0] == first[1] and hints[0] == hints[1]
    assert random.random() == before


def test_hostile_steps(lab):
    """A step before any reset is masked session_lost; a huge move is the game's to refuse; a second
    reset on the same session starts a new game; a malformed body is a 422."""
    server, rows = envs.textarena("TowerOfHanoi-v0", seeds=[0])
    env = lab.serve(server)

    def say(text):
        return {**rows[0], "response": {"output": [{"type": "message", "role": "assistant", "content": text}]}}

    with httpx.Client(base_url=env.url, timeout=60) as client:
        lost = client.post("/step", json=say("[A C]")).json()
        assert lost["mask_sample"] and lost["failure_kind"] == "session_lost"
        first = client.post("/reset", json=rows[0]).json()["observation"]
        huge = client.post("/step", json=say("[" + "A" * 100_000 + "]"))
        assert huge.status_code == 200 and "invalid" in huge.json()["observation"].lower()
        assert client.post("/reset", json=rows[0]).json()["observation"] == first  # a new game, same seed
        assert len(server.session_state) == 1
        assert client.post("/step", json={"response": "not a response"}).status_code == 422
        client.post("/close", json={})
    assert server.session_state == {}
