"""An agent-embedded environment: a number-guessing game played inside the agent's own ``/run``.

There is no resources server: ``GuessNumberAgent.run`` asks the model for a guess, answers
"higher" or "lower" itself, and grades the episode (reward 1.0 when the number is found within the
row's ``max_guesses``). Row fields: ``secret`` (the number), ``max_guesses`` (default 7, at most the
agent's ``max_steps``); a row without them, or with another type, is answered 422 naming the field.
"""

from __future__ import annotations

import re

from pydantic import Field

from gymlab import EmbeddedEnvironmentAgent
from gymlab.agents.base import AgentRunRequest
from gymlab.utils import is_gymlab_fastapi_entrypoint

#: A guess: a number of at most 9 digits (a longer one is no guess, and never a 4,300-digit int()).
NUMBER = re.compile(r"(?<!\d)-?\d{1,9}(?!\d)")


class GuessRow(AgentRunRequest):
    """A game: the number to find and how many guesses the model has."""

    secret: int
    max_guesses: int = Field(7, ge=1)


class GuessNumberAgent(EmbeddedEnvironmentAgent):
    """Plays the game with the bound model; the secret never reaches the model."""

    async def run(self, body: GuessRow):
        secret, limit = body.secret, min(body.max_guesses, self.max_steps or body.max_guesses)
        episode = self.start(body)
        while len(episode.steps) < limit:
            response = await self.ask(episode)
            found = NUMBER.search(response.output_text)
            guess = int(found.group()) if found else None
            if guess == secret:
                self.transition(episode, response, 1.0, terminated=True, info={"guess": guess})
                break
            hint = "Give a number." if guess is None else "Higher." if guess < secret else "Lower."
            self.transition(episode, response, 0.0, observation=hint, info={"guess": guess})
        return self.finish(body, episode, cut_by_limit=not episode.done)


def policy(request):
    """Rule-based model: binary search over the hints so far."""
    low, high, last = 1, 100, None
    for item in request.input_items():
        if item.type != "message":
            continue
        if item.role == "assistant":
            found = NUMBER.search(item.text)
            last = int(found.group()) if found else None
        elif item.role == "user" and last is not None:
            if "Higher" in item.text:
                low = last + 1
            elif "Lower" in item.text:
                high = last - 1
    return str((low + high) // 2)


if __name__ == "__main__":
    GuessNumberAgent.run_webserver()
elif is_gymlab_fastapi_entrypoint(__file__):
    # With num_workers > 1, uvicorn imports this module in each worker and serves its module-level `app`.
    app = GuessNumberAgent.run_webserver()  # noqa: F401
