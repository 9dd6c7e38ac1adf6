"""TextArena games as GymnasiumServers: the model plays one seat, a function or a model server the others;
each episode keeps its own copy of Python's global ``random`` state, so interleaved episodes replay as if
played alone (docs/envs.md)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import threading
from collections.abc import Callable, Iterable
from typing import Any

from fastapi import HTTPException
from pydantic import Field, PrivateAttr

from gymlab.envs.arena_checks import check_offline, no_downloads
from gymlab.envs.extras import need
from gymlab.envs.gym_env import LOST, plain, row_seed, row_tool, seeded_rows
from gymlab.protocol.responses import read_arguments
from gymlab.resources.gymnasium import GymnasiumServer

MOVE_TOOL = row_tool("move", "Make your move: the text the game asks for (e.g. '[4]').", {"action": {"type": "string"}})

#: What a game's parsing raises on a move it cannot read (a 1 MB number): the mover's invalid move.
PARSE_ERRORS = (ValueError, OverflowError, IndexError, KeyError, RecursionError)


class TextArenaServer(GymnasiumServer):
    """One TextArena game per episode; the model plays seat ``player``."""

    env_id: str = Field(description="A registered TextArena game, e.g. TicTacToe-v0.")
    num_players: int = Field(1, ge=1, description="Seats of the game (2 for a two-player game).")
    player: int = Field(0, ge=0, description="The model's seat.")
    opponent_model: str | None = Field(None, description="A model server's URL that plays the other seats.")
    opponent_timeout_s: float = Field(300.0, gt=0, description="Bound on one answer of opponent_model.")
    max_opponent_moves: int = Field(64, ge=1, description="Other seats' moves per model move before truncation.")
    make_kwargs: dict[str, Any] = Field(default_factory=dict, description="Keywords of textarena.make.")
    max_games: int = Field(256, ge=1, description="Games held at once; a reset past it is refused 503 (Retry-After).")
    max_move_chars: int = Field(4096, ge=1, description="Longest move passed to the game; longer: an invalid move.")
    max_game_chars: int = Field(256 << 10, ge=1, description="Characters of moves a game holds; past it: invalid.")
    _opponent: Callable[[str], str] | None = PrivateAttr(default=None)

    async def reset(self, metadata, session_id=None):
        if self.player >= self.num_players:
            raise HTTPException(422, f"{self.name}: player {self.player} is not a seat of {self.num_players}")
        if self.num_players > 1 and self._opponent is None and self.opponent_model is None:
            raise HTTPException(422, f"{self.name}: {self.env_id} has other seats; give opponent or opponent_model")
        seed = row_seed(self, metadata)
        if len(self.session_state) >= self.max_games and session_id not in self.session_state:
            raise HTTPException(
                503,
                f"{self.name}: {len(self.session_state)} games are held, the most this server holds (max_games); "
                "retry after Retry-After seconds, when one has ended, or raise max_games",
                headers={"retry-after": "1"},
            )
        state = {"random": random.Random(seed).getstate(), "chats": {}, "chars": 0}
        state["game"] = await _in_game(state, self._start, seed)
        self.session_state[session_id] = state
        state["before"] = await self._others(state)  # the seats before the model's: in the first step's moves
        if _inner(state["game"]).state.done:
            raise HTTPException(422, f"{self.name}: {self.env_id} ended before seat {self.player} moved")
        return _seen(state["game"], self.player), {}

    async def step(self, action, metadata, session_id=None):
        if (state := self.session_state.get(session_id)) is None:
            return None, 0.0, False, True, LOST
        calls = [item for item in action.output if item.type == "function_call"]
        text = _call_action(calls[0]) if calls else action.output_text
        info: dict[str, Any] = {}
        if calls:
            info["tool_outputs"] = [self.tool_output(c, {"played": text[: self.max_move_chars]}) for c in calls]
        done = await _in_game(state, self._move, state, text)
        info["moves"] = [*state.pop("before", []), {"player": self.player, "action": text[: self.max_move_chars]}]
        truncated = False
        if not done:
            info["moves"] += await self._others(state)
            done = _inner(state["game"]).state.done
            truncated = not done and _inner(state["game"]).state.current_player_id != self.player
        if not (done or truncated):
            return _seen(state["game"], self.player), 0.0, False, False, info
        rewards, game_info = await _in_game(state, state["game"].close)
        rewards = {int(k): float(v) for k, v in (rewards or {}).items()}
        info.update(rewards={str(k): v for k, v in rewards.items()}, game_info=plain(game_info))
        return _seen(state["game"], self.player) or None, rewards.get(self.player, 0.0), done, truncated, info

    def _start(self, seed: int | None) -> Any:
        check_offline(self.env_id)
        game = need("textarena").make(self.env_id, **self.make_kwargs)
        game.reset(num_players=self.num_players, seed=seed)
        return game

    def _move(self, state: dict, move: str) -> bool:
        """``move`` played by the seat to move (too long or unreadable: an invalid move); whether the game ended."""
        game, why = state["game"], None
        if len(move) > self.max_move_chars:
            why = f"the move is {len(move)} characters, over the {self.max_move_chars} this game reads"
        elif state["chars"] + len(move) > self.max_game_chars:
            why = f"the game's moves would pass the {self.max_game_chars} characters a game holds"
        if why is None:
            state["chars"] += len(move)
            try:
                return game.step(move)[0]
            except PARSE_ERRORS as exc:
                why = f"the game could not read the move ({type(exc).__name__}: {str(exc)[:200]})"
        inner = _inner(game)
        inner.state.set_invalid_move(reason=f"Invalid move: {why}.")
        return inner.state.step()[0]

    async def _others(self, state: dict) -> list[dict[str, Any]]:
        """The other seats' moves until it is the model's turn (or the game ends, or the move limit)."""
        game, moves = state["game"], []
        inner = _inner(game)
        while not inner.state.done and inner.state.current_player_id != self.player:
            if len(moves) >= self.max_opponent_moves:
                break
            seat = inner.state.current_player_id
            seen = _seen(game, seat)
            move = await self._opponent_move(state, seat, seen)
            await _in_game(state, self._move, state, move)
            moves.append({"player": seat, "observation": seen, "action": move[: self.max_move_chars]})
        return moves

    async def _opponent_move(self, state: dict, seat: int, seen: str) -> str:
        if self._opponent is not None:  # on the episode's random state: its draws replay with the seed
            return str(await _in_game(state, self._opponent, seen))
        chat = state["chats"].setdefault(seat, [])
        chat.append({"role": "user", "content": seen})
        reply = await self.client.ask_model(
            self.opponent_model, {"input": chat}, server=f"{self.name}'s opponent", timeout=self.opponent_timeout_s
        )
        chat.append({"role": "assistant", "content": reply.output_text})
        return reply.output_text


#: One game call at a time in this process: each swaps Python's global random state for its episode's.
_GAME_LOCK = threading.Lock()


async def _in_game(state: dict, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` in a thread, on the episode's own random state, ``nltk.download`` answered locally."""

    def run() -> Any:
        with _GAME_LOCK, _own_random(state), no_downloads():
            return fn(*args)

    return await asyncio.to_thread(run)


def _inner(game: Any) -> Any:
    while hasattr(game, "env"):
        game = game.env
    return game


def _seen(game: Any, seat: int) -> str:
    """What the game told ``seat`` since it last looked, its own moves left out, one message a paragraph."""
    inner = _inner(game)
    if seat != inner.state.current_player_id:  # observations are read for the seat to move
        messages = inner.state.observations[seat]
        inner.state.observations[seat] = []
    else:
        _, messages = inner.get_observation()
    kinds = need("textarena").ObservationType
    lines = []
    for sender, message, kind in messages:
        if kind == kinds.PLAYER_ACTION and sender in (seat, -1):
            continue
        who = inner.state.role_mapping.get(sender, f"Player {sender}") if sender != -1 else None
        lines.append(f"[{who}] {message}" if who else str(message))
    return "\n\n".join(lines)


def _call_action(call: Any) -> str:
    """A move call's ``action``; arguments past reading are the move as written (the game judges it)."""
    try:
        arguments = read_arguments(call.arguments)
    except ValueError:
        return call.arguments or ""
    action = arguments.get("action") if isinstance(arguments, dict) else None
    return action if isinstance(action, str) else json.dumps(arguments)


@contextlib.contextmanager
def _own_random(state: dict):
    """Run with the episode's own copy of Python's global random state, and put the process's back."""
    outer = random.getstate()
    random.setstate(state["random"])
    try:
        yield
    finally:
        state["random"] = random.getstate()
        random.setstate(outer)


def textarena(
    env_id: str,
    *,
    seeds: Iterable[int] = range(4),
    num_players: int = 1,
    player: int = 0,
    opponent: Callable[[str], str] | Any = None,
    tools: bool = False,
    instructions: str | None = None,
    name: str | None = None,
    **make_kwargs: Any,
) -> tuple[TextArenaServer, list[dict[str, Any]]]:
    """``(server, rows)`` for the TextArena game ``env_id``, one row per seed, ``opponent`` playing the other
    seats (the arguments: docs/envs.md)."""
    need("textarena")
    check_offline(env_id)
    server = TextArenaServer(
        name=name or f"textarena-{env_id.lower()}",
        env_id=env_id,
        num_players=num_players,
        player=player,
        make_kwargs=make_kwargs,
    )
    try:  # a game that cannot reset fails here, not at each episode
        with no_downloads(), _own_random({"random": random.getstate()}):
            server._start(0)
    except Exception as exc:
        raise RuntimeError(f"TextArena game {env_id} does not load or reset here: {type(exc).__name__}: {exc}") from exc
    if callable(opponent):
        server._opponent = opponent
    elif opponent is not None:
        server.opponent_model = opponent if isinstance(opponent, str) else opponent.url
    text = instructions or f"You are playing {env_id} as player {player}. Make your move when asked."
    return server, seeded_rows(text, seeds, [MOVE_TOOL] if tools else None)


def games() -> list[str]:
    """The registered TextArena game ids (their ``-raw`` and ``-train`` wrappings left out)."""
    need("textarena")
    from textarena.envs.registration import ENV_REGISTRY

    return sorted(k for k in ENV_REGISTRY if not k.endswith(("-raw", "-train")))
