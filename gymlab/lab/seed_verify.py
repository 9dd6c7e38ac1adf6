"""Seed/verify episodes: seed a session, call tools or let the model act, then verify for the reward."""

from __future__ import annotations

import json
import time
from typing import Any

from gymlab._http.client import error_message
from gymlab.errors import EpisodeError, ForkDivergedError, ServerError
from gymlab.lab.episode import Episode, _Session, answering
from gymlab.loop import model_turn, refusal, run_loop
from gymlab.protocol import (
    Message,
    NeMoGymResponse,
    Rollout,
    StepRecord,
    assistant_message,
    function_call,
)
from gymlab.protocol import record as records


class SeedVerifyEpisode(Episode):
    """A seed/verify episode: ``seed()``, then ``call``/``say``/``model_turn``/``run``, then ``verify()``."""

    protocol = "seed/verify"
    _start_name = "seed"
    _other_protocol_methods = frozenset({"reset", "areset", "step", "astep"})

    async def _call_tool(self, name: str, args: Any) -> str:
        """The loop's ``call_tool``: POST /{name} with the episode's cookie; the body is the output."""
        reply = await self.client.post(self.env_url, f"/{name}", args, self._session.cookies, self.env_name)
        return reply.text

    async def aseed(self) -> dict[str, Any]:
        """POST /seed_session with the row; returns the server's answer."""
        return await self._start("/seed_session", "seeded")

    async def _turn(self, response: NeMoGymResponse, call_tool=None, *, by_hand: bool = False) -> StepRecord:
        """Push ``response`` through the loop as if the model had answered it (``by_hand``: a call the
        researcher made, which may name a tool the row does not declare)."""
        await model_turn(self.state, answering(response), call_tool or self._call_tool, check_tools=not by_hand)
        self._actions.append(("call" if by_hand else "response", response))
        return self.state.steps[-1]

    async def acall(self, tool: str, /, **arguments: Any) -> Any:
        """Call tool route ``/{tool}`` by hand, as if the model had; returns the output (JSON-decoded). The
        call and its output join the conversation (and the verify); an error status raises ``ServerError``
        and records nothing."""
        self._require_open(f"call({tool!r})")
        if refusal(tool, [tool]) is not None:
            raise EpisodeError(
                f"{self.env_name}: {tool!r} is not a tool route (a lifecycle route, or not a plain "
                "name); use the episode's own methods (seed, verify, close) for those"
            )
        reply = await self.client.post(self.env_url, f"/{tool}", arguments, self._session.cookies, self.env_name)
        if not reply.ok:
            raise ServerError(
                self.env_name,
                f"POST /{tool}",
                reply.status,
                error_message(reply.text),
                "the call was not recorded; check the tool name and arguments",
            )
        response = NeMoGymResponse(model="by hand", output=[function_call(tool, arguments)])
        await self._turn(response, answering(reply.text), by_hand=True)
        try:
            return json.loads(reply.text)
        except ValueError:
            return reply.text

    async def asay(self, text: str, role: str = "assistant") -> Message:
        """Add a message: the assistant's (a final answer, as a model turn) or the user's (a follow-up)."""
        self._require_open("say()")
        if role == "assistant":
            await self._turn(NeMoGymResponse(model="by hand", output=[assistant_message(text)]))
            return self.state.added[-1]
        message = Message(role=role, content=text)
        self.state.added.append(message)
        self._actions.append(("message", message))
        return message

    async def amodel_turn(self) -> StepRecord:
        """One model call and each of its tool calls (``gymlab.loop.model_turn``); returns the step."""
        self._require_open("model_turn()")
        await model_turn(self.state, self.call_model, self._call_tool)
        self._actions.append(("response", self.state.last))
        return self.state.steps[-1]

    async def arun(self, max_steps: int | None = None) -> list[StepRecord]:
        """Model turns until the loop's stop rules end the episode (``gymlab.loop.run_loop``)."""
        self._require_open("run()")
        before = len(self.state.steps)
        limit = before + self._step_limit(max_steps)
        await run_loop(self.state, self._recording_model, self._call_tool, limit)
        return self.state.steps[before:]

    async def _recording_model(self, body: dict) -> NeMoGymResponse:
        response = await self.call_model(body)
        self._actions.append(("response", response))
        return response

    def _make_session(self) -> _Session:
        """Released by a verify of the conversation so far (a dropped episode is graded, which frees it)."""
        row, state = self.row, self.state

        def verify_body() -> dict[str, Any]:
            return {**row, "response": state.final_response().model_dump(mode="json", exclude_none=True)}

        return _Session(self.client, self.env_url, "/verify", server=self.env_name, release_body=verify_body)

    async def averify(self) -> Rollout:
        """POST /verify with the conversation so far; ends the episode and returns its rollout."""
        self._require_open("verify()")
        self._finalizer.detach()
        if not self._session.take():
            raise EpisodeError(f"{self.env_name}: the episode was closed while verifying")
        try:
            result = await self._session.send_release()
        except BaseException:
            self._closed = True
            raise
        self.result = result
        return self.rollout

    def _record(self) -> Rollout:
        return records.verified(
            self.result,
            self.state.steps,
            self.state.stop_reason,
            time.perf_counter() - self._started,
            row=self.row,
            response=self.state.final_response(),
        )

    async def _replay(self, original: SeedVerifyEpisode) -> None:
        await self.aseed()
        for kind, action in original._actions:
            if kind == "message":
                self.state.added.append(action)
                self._actions.append((kind, action))
                continue
            step = await self._turn(action, by_hand=kind == "call")
            recorded = original.state.steps[step.index]
            for old, new in zip(recorded.tool_outputs, step.tool_outputs):
                if old.output != new.output:
                    call = next((c for c in action.function_calls if c.call_id == old.call_id), None)
                    what = f"the output of tool {call.name if call else '?'}"
                    raise ForkDivergedError(self.env_name, step.index, what, old.output, new.output)
