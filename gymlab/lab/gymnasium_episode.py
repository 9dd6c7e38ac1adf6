"""Gymnasium episodes: reset, then step with an action (or the model's), each step a transition record."""

from __future__ import annotations

import time
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from gymlab.errors import ForkDivergedError, ServerError
from gymlab.lab.episode import Episode, Step, answering
from gymlab.loop import gymnasium_turn, with_user_message
from gymlab.protocol import (
    NeMoGymResponse,
    Rollout,
    StepRecord,
    assistant_message,
    function_call,
)
from gymlab.protocol import record as records
from gymlab.protocol.gymnasium import GymnasiumResetResponse


def response_of_action(action: Any = None, call: str | None = None, arguments: Any = None) -> NeMoGymResponse | None:
    """An action (assistant text, ``(name, arguments)``, ``call=``/``arguments=``, an item or a list of items,
    a response or its JSON) as the model response ``/step`` takes; None means "ask the model"."""
    if call is not None:
        if action is not None:
            raise TypeError("give the action or call=..., not both")
        action = (call, arguments or {})
    if action is None:
        return None
    if isinstance(action, NeMoGymResponse | dict):
        return NeMoGymResponse.model_validate(action)
    if isinstance(action, str):
        items = [assistant_message(action)]
    elif isinstance(action, tuple) and len(action) == 2 and isinstance(action[0], str):
        items = [function_call(action[0], action[1] if action[1] is not None else {})]
    elif isinstance(action, list):
        items = action
    elif hasattr(action, "type"):
        items = [action]
    else:
        raise TypeError(
            f"an action is text, (name, arguments), an item, a list of items or a response; got {type(action).__name__}"
        )
    return NeMoGymResponse(model="by hand", output=items)


class GymnasiumEpisode(Episode):
    """A Gymnasium episode: ``reset()``, then steps (``call("hit")``, ``say("I stand")``, ``step(action)``,
    ``step()``: the model acts) until terminated or truncated, each returning a ``Step``. The history
    grows exactly as ``gymnasium_agent``'s, so a model sees the same conversation here as in a run."""

    protocol = "gymnasium"
    _start_name = "reset"
    _other_protocol_methods = frozenset({"seed", "aseed", "model_turn", "amodel_turn", "verify", "averify"})

    observation: str | None = None
    reset_observation: str | None = None
    reset_info: Mapping[str, Any] = MappingProxyType({})  # the reset's info once reset
    last_step: Any = None

    async def areset(self) -> tuple[str | None, dict[str, Any]]:
        """POST /reset with the row; returns ``(observation, info)``."""
        reset = GymnasiumResetResponse.model_validate(await self._start("/reset", "reset"))
        self.state.params = with_user_message(self.params, reset.observation)
        self.observation, self.reset_info = reset.observation, reset.info
        self.reset_observation = reset.observation
        return reset.observation, reset.info

    async def astep(self, action: Any = None, *, call: str | None = None, arguments: Any = None) -> Step:
        """One transition: the action (or the model's answer) to ``/step``; returns the ``Step``."""
        self._require_open("step()")
        given = response_of_action(action, call, arguments)

        async def post_step(response: NeMoGymResponse) -> Any:
            self._actions.append(("response", response))
            try:
                return await self._env(
                    "/step", {**self.row, "response": response.model_dump(mode="json", exclude_none=True)}
                )
            except ServerError as exc:
                # The agents' rule: a failed episode releases its session once (a step that raised released
                # it on the server already, and the close says so; one that timed out did not).
                try:
                    await self.aclose()
                except ServerError as also:
                    exc.add_note(f"closing the episode also failed: {also}")
                raise

        record = await gymnasium_turn(self.state, self.call_model if given is None else answering(given), post_step)
        self.last_step, self.observation = self.state.transition, record.observation
        if record.terminated or record.truncated:
            self._session.ended()  # the server released the state itself
            self._finalizer.detach()
            self.result = {}
        elif self.max_steps is not None and len(self.steps) >= self.max_steps:
            record.truncated = True
            self.state.stop_reason = "max_steps"
            self.result = {}
            await self.aclose()
        step = Step(record.observation, record.reward, record.terminated, record.truncated, record.info)
        step.record = record
        return step

    async def acall(self, tool: str, /, **arguments: Any) -> Step:
        """Take a step whose action is a call of tool ``tool`` with ``arguments`` (spelt as a seed/verify
        episode's ``call``); returns the ``Step``."""
        return await self.astep(response_of_action((tool, arguments)))

    async def asay(self, text: str) -> Step:
        """Take a step whose action is the assistant's ``text``; returns the ``Step``."""
        return await self.astep(response_of_action(text))

    async def arun(self, max_steps: int | None = None) -> list[StepRecord]:
        """Model steps until the episode ends (or ``max_steps`` more steps); returns the new steps."""
        before = len(self.steps)
        limit = self._step_limit(max_steps)
        while not self.done and len(self.steps) - before < limit:
            await self.astep()
        return self.steps[before:]

    def _record(self) -> Rollout:
        """The record, with the fields ``gymnasium_agent`` reports."""
        return records.from_transitions(
            self.state.params,
            self.state.final_response(),
            self.steps,
            cut_by_limit=self.state.stop_reason == "max_steps",
            row=self.row,
            last=self.state.transition,
            duration_s=time.perf_counter() - self._started,
        )

    async def _replay(self, original: GymnasiumEpisode) -> None:
        observation, _ = await self.areset()
        if observation != original.reset_observation:
            raise ForkDivergedError(self.env_name, 0, "the reset observation", original.reset_observation, observation)
        for _kind, response in original._actions:
            await self.astep(response)
            old, new = original.steps[len(self.steps) - 1], self.steps[-1]
            for what, a, b in (
                ("the observation", old.observation, new.observation),
                ("the reward", old.reward, new.reward),
                ("terminated", old.terminated, new.terminated),
                ("truncated", old.truncated, new.truncated),
                ("the tool outputs", [o.output for o in old.tool_outputs], [o.output for o in new.tool_outputs]),
            ):
                if a != b:
                    raise ForkDivergedError(self.env_name, new.index, what, a, b)
