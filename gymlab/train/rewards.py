"""TRL reward functions for single-turn tasks: each completion graded by the server's own ``/verify``."""

from __future__ import annotations

from typing import Any

from gymlab.train.environments import _final_text, row_of
from gymlab.train.records import TrainingRun


def verify_reward(lab: Any, env: Any, *, run: TrainingRun | None = None):
    """A TRL reward function (named ``verify``) for rows built with ``trl_rows``: each completion is one
    episode of ``env`` (a seed/verify server served by ``lab``): seeded with its row, the completion said,
    verified. A masked episode (the verify failed) scores None, which TRL leaves out of the loss. The
    records go to ``run`` (``verify.run``, a new ``TrainingRun`` by default)."""
    run = run if run is not None else TrainingRun()

    def verify(completions: list[Any], **kwargs: Any) -> list[float | None]:
        step = getattr(kwargs.get("trainer_state"), "global_step", None)
        rows = kwargs.get("gymlab_row")
        if rows is None:
            row_of(kwargs)  # raises, naming the missing column
        rewards: list[float | None] = []
        for completion, row in zip(completions, rows, strict=True):
            with lab.episode(env, row_of({"gymlab_row": row})) as episode:
                try:
                    episode.seed()
                except Exception as exc:  # a seed that fails is masked like a failed verify
                    rewards.append(run.fail(episode, exc, "seed", step))
                    continue
                rewards.append(run.grade(episode, _final_text(completion), step))
        run.log(kwargs.get("log_metric"))
        return rewards

    verify.run = run
    return verify
