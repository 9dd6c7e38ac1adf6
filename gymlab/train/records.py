"""A training run's rollout records as they are graded (JSONL, ``Rollouts``, TRL's log, a live notebook view)."""

from __future__ import annotations

import io
import threading
from pathlib import Path
from typing import Any

from gymlab.failures import failure_of
from gymlab.jsonl import LineWriter, loads
from gymlab.protocol import Rollout
from gymlab.protocol import record as records
from gymlab.protocol.failure_kinds import Stage


class TrainingRun:
    """Every rollout of a training run as a record, with its ``train_step``: ``rollouts`` at any step, ``path``
    (a JSON line each, appended as graded; None: in memory only); ``masked`` counts those left out of the loss."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path is not None else None
        self._writer = LineWriter(self.path) if self.path is not None else None
        self._records: list[Rollout] = []
        self._lock = threading.Lock()
        self._batch: list[bool] = []  # masked or not, for the rollouts graded since the last ``log``
        self.masked = 0
        self.panel: Any = None  # a LivePanel once ``show()`` made one

    def add(self, record: Rollout, step: int | None = None) -> Rollout:
        """Keep ``record``, append it to the file, count it on the panel."""
        if step is not None:
            record = record.model_copy(update={"train_step": step})
        with self._lock:
            self._records.append(record)
            self._batch.append(record.mask_sample)
            self.masked += record.mask_sample
            if self._writer is not None:
                self._writer.write(loads(records.record_json(record)))
        if self.panel is not None:
            self.panel.add(record)
        return record

    def grade(self, episode: Any, answer: str, step: int | None = None) -> float | None:
        """Say ``answer`` in a seed/verify ``episode`` and verify it (a failure: ``fail``); the reward, or None
        when masked (TRL leaves it out)."""
        try:
            if answer:
                episode.say(answer)
            record = episode.verify()
        except Exception as exc:
            return self.fail(episode, exc, "verification", step)
        record = self.add(record, step)
        return None if record.mask_sample else record.reward

    def fail(self, episode: Any, exc: BaseException, stage: Stage, step: int | None = None) -> float | None:
        """Keep the masked record of ``episode`` failed with ``exc`` at ``stage`` (kind by ``failure_of``); None."""
        failure = failure_of(exc, role="resources", stage=stage)
        failed = records.failed(episode.row, failure, steps=episode.steps)
        self.add(records.with_identity(failed, env=episode.env_name), step)
        return None

    def log(self, log_metric: Any) -> None:
        """Log ``gymlab/masked`` and ``gymlab/masked_fraction`` of the rollouts graded since the last call."""
        with self._lock:
            batch, self._batch = self._batch, []
        if log_metric is not None and batch:
            log_metric("gymlab/masked", float(sum(batch)))
            log_metric("gymlab/masked_fraction", sum(batch) / len(batch))

    @property
    def rollouts(self):
        """The records so far as ``Rollouts`` (frames, viewer, profile, probes, export), in grading order."""
        from gymlab.lab.runs import Rollouts

        with self._lock:
            held = list(self._records)
        return Rollouts(held, completed=list(range(len(held))))

    def __len__(self) -> int:
        return len(self._records)

    def close(self) -> None:
        """Close the file (the records stay readable: ``gymlab.load(path)``)."""
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def show(self):
        """A notebook's live view: ``LivePanel`` over the reward curve, redrawn by ``callback()`` each step."""
        import ipywidgets as w

        from gymlab.lab.widgets import LivePanel

        self.panel = LivePanel(description="rollouts")
        # an Image whose value is replaced: an Output widget capturing inside the trainer's cell can hang it
        self._curve = w.Image(format="png")
        return w.VBox([self.panel, self._curve])

    def draw(self) -> None:
        """Redraw the reward curve (``plots.reward_curve`` over the rollouts in grading order)."""
        curve = getattr(self, "_curve", None)
        if curve is None or not len(self):
            return
        import matplotlib.pyplot as plt

        from gymlab.lab.plots import reward_curve

        fig = reward_curve(self.rollouts.episodes, order="completed")
        png = io.BytesIO()
        fig.savefig(png, format="png")
        plt.close(fig)
        curve.value = png.getvalue()

    def callback(self):
        """A ``transformers.TrainerCallback``: sizes the panel, redraws the curve each step, finishes the panel."""
        from transformers import TrainerCallback

        run = self

        class TrainingRunCallback(TrainerCallback):
            def on_train_begin(self, args, state, control, **kwargs):
                if run.panel is not None:
                    run.panel.total = (
                        state.max_steps * args.per_device_train_batch_size * args.gradient_accumulation_steps
                    )

            def on_step_end(self, args, state, control, **kwargs):
                run.draw()

            def on_train_end(self, args, state, control, **kwargs):
                run.draw()
                if run.panel is not None:
                    run.panel.finish()

        return TrainingRunCallback()
