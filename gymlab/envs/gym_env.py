"""Any Gymnasium env whose observation reads as text, as a GymnasiumServer: one env per episode, reset with
the row's ``seed``; the model acts by an action's name or number, an unreadable action changes nothing
(docs/envs.md)."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from fastapi import HTTPException
from pydantic import Field, PrivateAttr

from gymlab.envs.extras import need
from gymlab.protocol.responses import read_arguments
from gymlab.resources.gymnasium import GymnasiumServer
from gymlab.resources.tools import function_tool, rows_from

#: The discrete actions' names of Gymnasium's own envs, by the env spec's name.
ACTION_NAMES = {
    **dict.fromkeys(("FrozenLake", "FrozenLake8x8"), ["left", "down", "right", "up"]),
    **dict.fromkeys(("CliffWalking", "CliffWalkingSlippery"), ["up", "right", "down", "left"]),
    "Taxi": ["south", "north", "east", "west", "pickup", "dropoff"],
    "Blackjack": ["stick", "hit"],
    "CartPole": ["left", "right"],
    "MountainCar": ["left", "none", "right"],
    "Acrobot": ["negative", "none", "positive"],
}

#: A step's info for a session the server does not hold (never reset, ended, or the server restarted).
LOST = {
    "mask_sample": True,
    "failure_kind": "session_lost",
    "failure_reason": "no episode is held for this session (reset first; it may have ended or the server restarted)",
}

_HIGHLIGHT = re.compile(r"\x1b\[4\d(?:;\d+)*m(.*?)\x1b\[0m", re.DOTALL)
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def plain(value: Any) -> Any:
    """``value`` as JSON holds it (numpy arrays and scalars, tuples, sets)."""
    return json.loads(json.dumps(value, default=lambda v: v.tolist() if hasattr(v, "tolist") else str(v)))


def text_observation(env: Any, observation: Any) -> str:
    """The ``ansi`` render (a highlighted cell as ``[x]``, colours dropped), then ``observation: <obs>``."""
    shown = f"observation: {json.dumps(plain(observation))}"
    if getattr(env, "render_mode", None) != "ansi":
        return shown
    board = _ANSI.sub("", _HIGHLIGHT.sub(r"[\1]", env.render())).strip("\n")
    return f"{board}\n{shown}"


def row_seed(server: GymnasiumServer, metadata: dict) -> int | None:
    """The row's ``seed``: a whole number >= 0 or null; anything else a 422 naming the server."""
    seed = metadata.get("seed")
    if seed is None or (isinstance(seed, int) and not isinstance(seed, bool) and seed >= 0):
        return seed
    raise HTTPException(422, f"{server.name}: seed must be a whole number >= 0 or null, got {seed!r:.80}")


class GymEnvServer(GymnasiumServer):
    """A Gymnasium env, one instance per episode; ``seed`` from the row, actions by name or number."""

    env_id: str | None = Field(None, description="The registered env (gymnasium.make); None: the env passed in.")
    make_kwargs: dict[str, Any] = Field(default_factory=dict, description="Keywords of gymnasium.make.")
    actions: list[str] | None = Field(None, description="Names of the discrete actions, in order.")
    _factory: Callable[[], Any] | None = PrivateAttr(default=None)
    _formatter: Callable[[Any, Any], str] | None = PrivateAttr(default=None)

    def make_env(self) -> Any:
        """A fresh env: a copy of the env passed in, else ``gymnasium.make`` (``ansi`` render where offered)."""
        if self._factory is not None:
            return self._factory()
        gym = need("gymnasium")
        if self.env_id is None:
            raise ValueError(f"{self.name}: no env_id and no env; give one")
        kwargs = dict(self.make_kwargs)
        if "render_mode" not in kwargs:
            from gymnasium.envs.registration import load_env_creator

            creator = load_env_creator(gym.spec(self.env_id).entry_point)
            if "ansi" in getattr(creator, "metadata", {}).get("render_modes", ()):
                kwargs["render_mode"] = "ansi"
        return gym.make(self.env_id, **kwargs)

    def observe(self, env: Any, observation: Any) -> str:
        """The model's text for ``observation``: your formatter's, else ``text_observation``'s."""
        return (self._formatter or text_observation)(env, observation)

    def action_names(self, env: Any) -> list[str]:
        """The discrete actions' names: ``actions``, else Gymnasium's own envs' (``ACTION_NAMES``)."""
        known = ACTION_NAMES.get(getattr(getattr(env, "spec", None), "name", None), [])
        return list(self.actions if self.actions is not None else known)

    def read_action(self, env: Any, calls: list[Any], text: str) -> Any:
        """The env action a turn stands for, or None: the first call (an action's name, or its ``action``
        argument), else the text (an action's name, else a number)."""
        names = self.action_names(env)
        if calls:
            call = calls[0]
            try:
                arguments = read_arguments(call.arguments)
            except ValueError:  # past reading: an unreadable action
                arguments = {}
            value = (
                call.name if call.name in names else arguments.get("action") if isinstance(arguments, dict) else None
            )
        else:
            words = re.findall(r"[a-z_]+|-?\d+(?:\.\d+)?", text.lower())
            value = next((w for w in words if w in names), None)
            if value is None:
                value = next((w for w in words if not w.isalpha() and not w.startswith("_")), text.strip())
        return _in_space(env.action_space, names.index(value) if value in names else value)

    async def reset(self, metadata, session_id=None):
        seed, options = row_seed(self, metadata), metadata.get("options")
        if options is not None and not isinstance(options, dict):
            raise HTTPException(422, f"{self.name}: options must be an object of reset options, got {options!r:.80}")
        env = self.make_env()
        try:
            observation, info = env.reset(seed=seed, options=options)
        except (TypeError, ValueError, OverflowError, KeyError) as exc:
            env.close()
            if options is None:  # the env's own failure
                raise
            raise HTTPException(422, f"{self.name}: the env refused the reset options {options!r:.80}: {exc}") from None
        self.session_state[session_id] = {"env": env, "observation": self.observe(env, observation)}
        return self.session_state[session_id]["observation"], plain(info)

    async def step(self, action, metadata, session_id=None):
        if (state := self.session_state.get(session_id)) is None:
            return None, 0.0, False, True, LOST
        env = state["env"]
        calls = [item for item in action.output if item.type == "function_call"]
        chosen = self.read_action(env, calls, action.output_text)
        info: dict[str, Any] = {}
        if calls:
            info["tool_outputs"] = [self.tool_output(c, {"action": plain(chosen)}) for c in calls]
        if chosen is None:  # nothing happens (so a random text action is a valid step)
            info["unreadable_action"] = (calls[0].name if calls else action.output_text)[:200]
            return state["observation"], 0.0, False, False, info
        observation, reward, terminated, truncated, step_info = env.step(chosen)
        state["observation"] = self.observe(env, observation)
        return state["observation"], float(reward), terminated, truncated, {**plain(step_info), **info}

    async def close_session(self, session_id: str) -> None:
        if (state := self.session_state.get(session_id)) is not None:
            state["env"].close()
        await super().close_session(session_id)


def _in_space(space: Any, value: Any) -> Any:
    """``value`` as an element of ``space`` (a discrete index, else the JSON value as an array), or None."""
    import numpy as np

    try:
        if hasattr(space, "n"):  # Discrete: a whole number (not a bool, not a float)
            if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
                value = int(value)
            if not isinstance(value, int) or isinstance(value, bool):
                return None
            element = np.int64(value)
        else:
            element = np.asarray(json.loads(value) if isinstance(value, str) else value, dtype=space.dtype)
    except (TypeError, ValueError, OverflowError, RecursionError):
        return None
    return element if space.contains(element) else None


def gymnasium(
    env: Any,
    *,
    seeds: Iterable[int] = range(4),
    instructions: str | None = None,
    tools: bool = False,
    actions: list[str] | None = None,
    formatter: Callable[[Any, Any], str] | None = None,
    name: str | None = None,
    **make_kwargs: Any,
) -> tuple[GymEnvServer, list[dict[str, Any]]]:
    """``(server, rows)`` for an env id (made with ``make_kwargs``) or an env (each episode plays a deep copy),
    one row per seed (the other arguments: docs/envs.md)."""
    gym = need("gymnasium")
    env_id = env if isinstance(env, str) else None
    server = GymEnvServer(
        name=name or f"gym-{(env_id or type(getattr(env, 'unwrapped', env)).__name__).lower()}",
        env_id=env_id,
        make_kwargs=make_kwargs,
        actions=actions,
    )
    if env_id is None:
        if not isinstance(env, gym.Env):
            raise TypeError(f"gymlab.envs.gymnasium takes an env id or a gymnasium.Env, not {type(env).__name__}")
        template = copy.deepcopy(env)
        server._factory = lambda: copy.deepcopy(template)
    if formatter is not None:
        server._formatter = formatter
    sample = server.make_env()
    names = server.action_names(sample)
    title = env_id or type(sample.unwrapped).__name__
    sample.close()
    how = f"one action of: {', '.join(names)}" if names else f"one action of the space {sample.action_space}"
    text = instructions or f"You are playing {title}. Each turn, answer with {how}."
    declared = [row_tool(n, f"Take the action {n!r}.", {}) for n in names] or [
        row_tool("act", f"Take an action of {sample.action_space}.", {"action": {}})
    ]
    return server, seeded_rows(text, seeds, declared if tools else None)


def env_ids() -> list[str]:
    """Gymnasium's registered envs that read as text here: those with an ``ansi`` render or known action names."""
    gym = need("gymnasium")
    return sorted(
        k for k, spec in gym.envs.registry.items() if "toy_text" in str(spec.entry_point) or spec.name in ACTION_NAMES
    )


def seeded_rows(text: str, seeds: Iterable[int], tools: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
    """One row per seed, ``text`` its prompt, ``tools`` declared (None: none)."""
    seeds = list(seeds)
    return rows_from([text] * len(seeds), tools=tools, seed=seeds)


def row_tool(name: str, description: str, properties: dict) -> dict[str, Any]:
    """A row's function tool whose ``properties`` are all required (their defaults and extras kept)."""
    return function_tool(name, description, {"properties": properties, "required": list(properties)}, strict=False)
