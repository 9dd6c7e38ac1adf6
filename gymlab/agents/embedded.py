"""Agent-embedded environments: an agent whose ``/run`` computes the reward itself (docs/servers.md)."""

from __future__ import annotations

import time
from abc import abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, get_type_hints

from fastapi import FastAPI

from gymlab.agents.base import AgentRunRequest, BaseAgent, EpisodeRun, dump_row
from gymlab.loop import LoopState, ask_model, gymnasium_transition
from gymlab.protocol import Message, NeMoGymResponse
from gymlab.protocol import record as records
from gymlab.protocol.gymnasium import GymnasiumStepResponse
from gymlab.protocol.record import Rollout, StepRecord


@dataclass
class EmbeddedEpisode:
    """One episode in progress: the conversation, the steps so far, the last transition."""

    state: LoopState
    started: float = field(default_factory=time.perf_counter)
    last: GymnasiumStepResponse | None = None
    asked: float = field(default_factory=time.perf_counter)

    @property
    def steps(self) -> list[StepRecord]:
        return self.state.steps

    @property
    def done(self) -> bool:
        return self.last is not None and (self.last.terminated or self.last.truncated)


class EmbeddedEnvironmentAgent(BaseAgent):
    """Base of an agent whose ``run`` plays the environment itself; its ``body`` annotation is the route's body."""

    verifies: ClassVar[bool] = False  # ``run`` grades the episode itself

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()

        async def run_route(body: AgentRunRequest) -> Rollout:
            async def play(run: EpisodeRun) -> Rollout:
                run.stage = "agent"  # no session to open: the agent is the environment
                return await self.run(body)

            return await self.run_episode(dump_row(body), play)

        run_route.__annotations__["body"] = get_type_hints(type(self).run).get("body", AgentRunRequest)
        app.post("/run", response_model=Rollout)(run_route)
        return app

    @abstractmethod
    async def run(self, body: AgentRunRequest) -> Rollout:
        """Play one episode of the row ``body`` and return its record."""

    def start(self, body: AgentRunRequest, observation: str | None = None) -> EmbeddedEpisode:
        """A new episode of ``body``; a non-empty ``observation`` is the first user message after its input."""
        episode = EmbeddedEpisode(LoopState(body.responses_create_params))
        if observation:
            self.observe(episode, observation)
        return episode

    async def ask(self, episode: EmbeddedEpisode) -> NeMoGymResponse:
        """The model's response to the conversation so far (its output joins the conversation)."""
        episode.asked = time.perf_counter()
        return await ask_model(episode.state, self.call_model)

    def transition(
        self,
        episode: EmbeddedEpisode,
        response: NeMoGymResponse,
        reward: float = 0.0,
        *,
        terminated: bool = False,
        truncated: bool = False,
        observation: str | None = None,
        info: dict[str, Any] | None = None,
    ) -> StepRecord:
        """Record what ``response`` did (reward, end, the next observation for the model)."""
        episode.last = GymnasiumStepResponse(
            reward=reward, terminated=terminated, truncated=truncated, observation=observation, info=dict(info or {})
        )
        return gymnasium_transition(episode.state, response, episode.last, time.perf_counter() - episode.asked)

    def observe(self, episode: EmbeddedEpisode, text: str) -> None:
        """Add a user message the model sees next (outside a transition)."""
        episode.state.added.append(Message(role="user", content=text))

    def finish(self, body: AgentRunRequest, episode: EmbeddedEpisode, *, cut_by_limit: bool = False) -> Rollout:
        """The episode's record: reward summed over the steps; ``cut_by_limit`` marks it truncated."""
        return records.from_transitions(
            body.responses_create_params,
            episode.state.final_response(),
            episode.steps,
            cut_by_limit=cut_by_limit,
            duration_s=time.perf_counter() - episode.started,
            row=dump_row(body),
            last=episode.last,
        )
