"""Notebook widgets: an interactive stepper and a live collection panel (the viewer: ``gymlab.lab.viewer``).
Plain ipywidgets whose state lives in traits: their logic is tested without a browser."""

from __future__ import annotations

import html
import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import ipywidgets as w

from gymlab._sync import run_sync
from gymlab.errors import GymlabError
from gymlab.lab.runs import arun_many
from gymlab.lab.viewer import EpisodeViewer, add_classes, failure_of
from gymlab.protocol import Rollout
from gymlab.resources.tools import example_arguments


class Stepper(w.VBox):
    """Drive a live episode (``lab.episode(env, row, model=model)``, either protocol; seeded or reset on
    creation) by hand: a tool and JSON arguments, or a message; a model step; reset; verify (not for a
    Gymnasium episode: its rewards come with each step). The viewer below follows; errors show in the widget."""

    def __init__(self, episode: Any, **kwargs: Any):
        self.episode = episode
        tools = list(getattr(episode.params, "tools", []) or [])
        self._tools = {t.name: t for t in tools}
        self.tool = w.Dropdown(
            options=[("(message)", "")] + [(t.name, t.name) for t in tools],
            value=tools[0].name if tools else "",
            description="action",
        )
        self.arguments = w.Text(description="arguments", placeholder='{"name": value}')
        self.text = w.Text(description="message", placeholder="assistant text (when action is (message))")
        self.step_button = w.Button(description="step", button_style="primary")
        self.model_button = w.Button(description="model step")
        self.reset_button = w.Button(description="reset")
        self.verify_button = w.Button(description="verify", button_style="success")
        self.message = w.HTML()
        self.viewer = EpisodeViewer()
        add_classes(
            self, "gl-stepper", "tool arguments text step_button model_button reset_button verify_button message"
        )
        self.tool.observe(lambda _: self._prefill(), names="value")
        buttons = w.HBox([self.step_button, self.model_button, self.reset_button, self.verify_button])
        for button, action in zip(buttons.children, (self._step, self._model_step, self._reset, self._verify)):
            button.on_click(lambda _, action=action: self._act(action))
        super().__init__([w.HBox([self.tool, self.arguments]), self.text, buttons, self.message, self.viewer], **kwargs)
        self._prefill()
        self._act(self._start)

    def _start(self) -> str:
        if self.episode.done or self.episode._session.open:
            return ""
        getattr(self.episode, self.episode._start_name)()  # seed, or a Gymnasium episode's reset
        return "reset" if self._gymnasium else "seeded"

    @property
    def _gymnasium(self) -> bool:
        return getattr(self.episode, "protocol", "") == "gymnasium"

    def _step(self) -> str:
        name = self.tool.value
        if name:
            try:
                args = json.loads(self.arguments.value or "{}")
            except ValueError as exc:
                raise GymlabError(f"arguments are not JSON: {exc}") from None
            if not isinstance(args, dict):
                raise GymlabError(f"arguments must be a JSON object, got {self.arguments.value!r}")
            self.episode.call(name, **args)  # a Gymnasium episode's call and say are steps
            return f"called {name}"
        if not self.text.value:
            raise GymlabError("write a message, or pick a tool as the action")
        self.episode.say(self.text.value)
        return "said it"

    def _model_step(self) -> str:
        if self._gymnasium:
            self.episode.step(None)
        else:
            self.episode.model_turn()
        return "the model took a step"

    def _reset(self) -> str:
        old = self.episode
        self.episode = old._spawn()  # the same row, servers and model, in a new session
        old.close()
        self._start()
        return "a new episode"

    def _verify(self) -> str:
        rollout = self.episode.verify()
        return f"verified: reward {rollout.reward:g}"

    def _act(self, action: Callable[[], str]) -> None:
        try:
            note = action()
        except (GymlabError, TypeError, ValueError) as exc:
            self.message.value = f"<span class='gl-err'>{html.escape(str(exc))}</span>"
        else:
            if self._gymnasium and self.episode.done and self.episode.steps:
                last = self.episode.steps[-1]
                note += " · the episode " + ("terminated" if last.terminated else "was truncated")
            self.message.value = html.escape(note)
        done = self.episode.done
        self.step_button.disabled = done
        self.model_button.disabled = done or not getattr(self.episode, "model_url", None)
        self.verify_button.disabled = done or self._gymnasium
        self.viewer.load(self.episode)

    def _prefill(self) -> None:
        tool = self._tools.get(self.tool.value)
        self.arguments.disabled = tool is None
        self.text.disabled = tool is not None
        if tool is not None:
            self.arguments.value = json.dumps(example_arguments(tool.parameters))


_TABLE_CSS = "<style>.gl-failures-table th,.gl-failures-table td{text-align:left;padding:1px 16px 1px 0}</style>"


class LivePanel(w.VBox):
    """Progress, running mean reward and failures by kind while a run collects, redrawn at most every
    ``interval`` seconds; ``panel.run(agent, rows, repeats=...)`` collects through ``gymlab.lab.runs``."""

    interval = 0.1  #: seconds between redraws while a run collects

    def __init__(self, total: int = 0, *, clock: Callable[[], float] = time.monotonic, **kwargs: Any):
        self.progress = w.IntProgress(value=0, min=0, max=max(total, 1), description="episodes")
        self.summary = w.HTML()
        self.failures = w.HTML()
        add_classes(self, "gl-live", "progress summary failures")
        super().__init__([self.progress, self.summary, self.failures], **kwargs)
        self.total, self.clock = total, clock
        self.done, self.kept, self.reward_sum = 0, 0, 0.0
        self.failed: Counter[str] = Counter()
        self.stages: dict[str, Counter[str]] = {}  # failure kind -> the stages it happened at
        self.renders = 0
        self._last = float("-inf")
        self._lock = threading.Lock()
        self.render()

    @property
    def mean_reward(self) -> float:
        return self.reward_sum / self.kept if self.kept else float("nan")

    def add(self, record: Rollout) -> None:
        """Count one finished episode; a masked one under its failure kind, out of the mean."""
        if kind := failure_of(record):
            return self.add_failure(kind, record.failure_stage)
        with self._lock:
            self.done += 1
            self.kept += 1
            self.reward_sum += record.reward
        self._maybe_render()

    def add_failure(self, kind: str, stage: str | None = None) -> None:
        """Count one episode that produced no record of its own (its typed failure's kind and stage)."""
        with self._lock:
            self.done += 1
            self.failed[kind] += 1
            if stage:
                self.stages.setdefault(kind, Counter())[stage] += 1
        self._maybe_render()

    def _maybe_render(self) -> None:
        if self.clock() - self._last >= self.interval:
            self.render()

    def render(self) -> None:
        """Redraw now (``finish`` calls it; updates call it at most every ``interval``)."""
        with self._lock:
            self._last = self.clock()
            self.renders += 1
            self.progress.max = max(self.total, self.done, 1)
            self.progress.value = self.done
            mean = "–" if not self.kept else f"{self.mean_reward:.3f}"
            left_out = self.done - self.kept
            self.summary.value = (
                f"<span class='gl-done'>{self.done} of {self.total}</span> episodes · "
                f"<span class='gl-mean'>mean reward {mean}</span> "
                f"<span class='gl-mean-covers'>over {self.kept} unmasked of {self.done}</span>"
                + (f" ({left_out} masked or failed, left out of the mean)" if left_out else "")
            )
            rows = "".join(
                f"<tr><td>{html.escape(k)}</td><td>{html.escape(', '.join(sorted(self.stages.get(k, ()))))}</td>"
                f"<td>{n}</td></tr>"
                for k, n in self.failed.most_common()
            )
            self.failures.value = (
                f"{_TABLE_CSS}<table class='gl-failures-table'>"
                f"<tr><th>failure kind</th><th>stage</th><th>episodes</th></tr>{rows}</table>"
                if rows
                else "no failures"
            )

    def finish(self) -> None:
        """Redraw, and colour the bar: green no failure, amber some, red every one."""
        self.render()
        self.progress.bar_style = "success" if not self.failed else "danger" if not self.kept else "warning"

    async def arun(self, agent: Any, rows: list[dict[str, Any]], *, repeats: int = 1, **options: Any):
        """Collect with ``gymlab.lab.runs.arun_many`` (its keywords), counting each episode as it finishes."""
        self.total = len(rows) * repeats
        try:
            return await arun_many(agent, rows, repeats=repeats, observe=self.add, **options)
        finally:
            self.finish()

    def run(self, agent: Any, rows: list[dict[str, Any]], **options: Any):
        """Sync form of ``arun`` (the same keywords); returns the ``Rollouts``."""
        return run_sync(self.arun(agent, rows, **options))
