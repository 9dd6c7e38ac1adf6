"""Notebook widgets (ipywidgets): an episode viewer, an interactive stepper, a live collection panel.

Imported only when used (``import gymlab`` never loads ipywidgets). Every widget is a plain
ipywidgets container whose state lives in traits, so its logic runs and is tested without a
browser (``.value``, ``.click()``); the browser test renders the same widgets in JupyterLab.
"""

from __future__ import annotations

import html
import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import ipywidgets as w

from gymlab.errors import GymlabError
from gymlab.protocol import (
    FunctionCall,
    FunctionCallOutput,
    Message,
    NeMoGymResponse,
    Reasoning,
    Rollout,
    StepRecord,
    function_call,
)

_CSS = """<style>
.gl-chat{font-family:system-ui,sans-serif;font-size:13px;max-width:720px}
.gl-b{margin:4px 0;padding:6px 10px;border-radius:10px;white-space:pre-wrap;word-break:break-word;max-width:80%}
.gl-user{background:#dbeafe;margin-left:auto}
.gl-assistant{background:#f3f4f6}
.gl-system{background:#fff;color:#555;font-style:italic;border:1px dashed #ccc}
.gl-call{background:#fff7ed;border:1px solid #fdba74;font-family:monospace}
.gl-output{background:#ecfdf5;border:1px solid #6ee7b7;font-family:monospace}
.gl-reasoning{background:#faf5ff;color:#6b21a8;font-size:12px}
.gl-who{font-size:10px;color:#666;display:block}
.gl-now{box-shadow:0 0 0 2px #f59e0b}
.gl-row{display:flex;flex-direction:column}
.gl-err{color:#b91c1c;font-family:monospace;white-space:pre-wrap}
</style>"""


# -- what a viewer shows ----------------------------------------------------------------------


def _as_rollout(source: Any) -> Rollout:
    if isinstance(source, Rollout):
        return source
    if isinstance(source, dict):
        return Rollout.model_validate(source)
    rollout = getattr(source, "rollout", None)
    if isinstance(rollout, Rollout):
        return rollout
    raise TypeError(f"a viewer shows a Rollout, a rollout dict or an episode, not {type(source).__name__}")


def episode_steps(record: Rollout) -> list[StepRecord]:
    """The record's steps; a record without per-step records (a NeMo Gym file) is one step."""
    if record.steps:
        return list(record.steps)
    return [StepRecord(index=0, action=list(record.response.output), reward=record.reward)]


def prompt_items(record: Rollout) -> list[Any]:
    params = record.responses_create_params
    items = params.input_items()
    return ([Message(role="system", content=params.instructions)] if params.instructions else []) + items


def _bubble(item: Any, now: bool) -> str:
    cls, who, text = "gl-assistant", "assistant", ""
    if isinstance(item, Message):
        who = item.role
        cls = {"user": "gl-user", "assistant": "gl-assistant"}.get(item.role, "gl-system")
        text = item.text
    elif isinstance(item, FunctionCall):
        cls, who, text = "gl-call", "tool call", f"{item.name}({item.arguments})"
    elif isinstance(item, FunctionCallOutput):
        cls, who, text = "gl-output", "tool output", item.output
    elif isinstance(item, Reasoning):
        cls, who, text = "gl-reasoning", "reasoning", " ".join(s.text for s in item.summary)
    else:
        who, text = getattr(item, "type", "item"), json.dumps(item.model_dump(mode="json"))[:500]
    mark = " gl-now" if now else ""
    return f"<div class='gl-b {cls}{mark}'><span class='gl-who'>{html.escape(who)}</span>{html.escape(text)}</div>"


def conversation_html(record: Rollout, upto: int) -> str:
    """The prompt and steps ``0..upto`` as chat bubbles; step ``upto``'s items are outlined."""
    parts = [_bubble(i, False) for i in prompt_items(record)]
    for step in episode_steps(record)[: upto + 1]:
        now = step.index == upto
        parts.extend(_bubble(i, now) for i in [*step.action, *step.tool_outputs])
        if step.observation:
            parts.append(_bubble(Message(role="user", content=step.observation), now))
    return f"{_CSS}<div class='gl-chat gl-row'>{''.join(parts)}</div>"


def sparkline_svg(values: list[float], current: int | None = None, width: int = 160, height: int = 32) -> str:
    """Per-step rewards as a small inline SVG line; the current step is a red dot."""
    if not values:
        return f"<svg class='gl-spark' width='{width}' height='{height}'></svg>"
    lo, hi = min(values + [0.0]), max(values + [0.0])
    span = (hi - lo) or 1.0
    pad = 4
    step = (width - 2 * pad) / max(len(values) - 1, 1)

    def xy(i: int, v: float) -> tuple[float, float]:
        return pad + i * step, height - pad - (v - lo) / span * (height - 2 * pad)

    points = " ".join("{:.1f},{:.1f}".format(*xy(i, v)) for i, v in enumerate(values))
    dot = ""
    if current is not None and 0 <= current < len(values):
        x, y = xy(current, values[current])
        dot = f"<circle class='gl-spark-now' cx='{x:.1f}' cy='{y:.1f}' r='3' fill='#dc2626'/>"
    zero_y = xy(0, 0.0)[1]
    return (
        f"<svg class='gl-spark' width='{width}' height='{height}' viewBox='0 0 {width} {height}'>"
        f"<line x1='{pad}' x2='{width - pad}' y1='{zero_y:.1f}' y2='{zero_y:.1f}' stroke='#ddd'/>"
        f"<polyline fill='none' stroke='#2563eb' stroke-width='1.5' points='{points}'/>{dot}</svg>"
    )


class EpisodeViewer(w.VBox):
    """An episode step by step: chat bubbles up to the chosen step, a reward sparkline, prev/next, a slider.

    ``EpisodeViewer(rollout)`` (a ``Rollout``, a rollout dict, or a live episode); ``.load(source)``
    shows another (or the same episode, further on). ``.step`` is the shown step, counted from 1.
    """

    def __init__(self, source: Any = None, step: int | None = None, **kwargs: Any):
        self.prev = w.Button(description="◀ prev", layout=w.Layout(width="80px"))
        self.next = w.Button(description="next ▶", layout=w.Layout(width="80px"))
        self.slider = w.IntSlider(min=0, max=0, value=0, description="step", continuous_update=True)
        self.status = w.HTML()
        self.sparkline = w.HTML()
        self.conversation = w.HTML()
        for widget, name in (
            (self, "gl-viewer"),
            (self.prev, "gl-prev"),
            (self.next, "gl-next"),
            (self.slider, "gl-slider"),
            (self.status, "gl-status"),
            (self.sparkline, "gl-sparkline"),
            (self.conversation, "gl-conversation"),
        ):
            widget.add_class(name)
        self.prev.on_click(lambda _: self._move(-1))
        self.next.on_click(lambda _: self._move(+1))
        self.slider.observe(lambda change: self._render(), names="value")
        controls = w.HBox([self.prev, self.slider, self.next, self.sparkline])
        super().__init__([controls, self.status, self.conversation], **kwargs)
        self.record: Rollout | None = None
        self.steps: list[StepRecord] = []
        if source is not None:
            self.load(source, step)

    def load(self, source: Any, step: int | None = None) -> EpisodeViewer:
        """Show ``source`` at ``step`` (from 1; default: its last step)."""
        self.record = _as_rollout(source)
        self.steps = episode_steps(self.record) if (self.record.steps or self.record.response.output) else []
        n = len(self.steps)
        target = n if step is None else max(1, min(step, n))
        # The browser's slider applies an update's keys one by one, "value" before "max", and clamps a
        # value outside its current range, sending the clamped value back (continuous_update): one
        # message {value: 3, max: 3} became value 2 in the kernel, and the viewer fell back a step.
        # So widen the range in messages of its own first, then move the value, then narrow the range.
        low = 1 if n else 0
        if n > self.slider.max:
            self.slider.max = n
        if low < self.slider.min:
            self.slider.min = low
        self.slider.value = target
        self.slider.min = low
        self.slider.max = n
        self.slider.disabled = n <= 1
        self._render()
        return self

    @property
    def step(self) -> int:
        return self.slider.value

    def _move(self, delta: int) -> None:
        self.slider.value = max(self.slider.min, min(self.slider.max, self.slider.value + delta))

    def _render(self) -> None:
        if self.record is None:
            self.status.value, self.conversation.value = "", ""
            return
        n, k = len(self.steps), self.slider.value
        rewards = [s.reward for s in self.steps]
        self.prev.disabled = k <= 1
        self.next.disabled = k >= n
        self.sparkline.value = sparkline_svg(rewards, k - 1 if n else None)
        self.conversation.value = conversation_html(self.record, k - 1 if n else -1)
        if not n:
            self.status.value = f"<span class='gl-step'>no steps yet</span> · total reward {self.record.reward:g}"
            return
        cumulative = sum(rewards[:k])
        flags = " · terminated" * self.steps[k - 1].terminated + " · truncated" * self.steps[k - 1].truncated
        masked = f" · masked ({html.escape(str(self.record.failure_kind))})" if self.record.mask_sample else ""
        self.status.value = (
            f"<span class='gl-step'>step {k} of {n}</span> · "
            f"<span class='gl-reward'>reward {rewards[k - 1]:g}</span> · "
            f"cumulative {cumulative:g} · episode reward {self.record.reward:g}{flags}{masked}"
        )


# -- the stepper --------------------------------------------------------------------------------


def example_arguments(tool: Any) -> dict[str, Any]:
    """Placeholder arguments from a tool's JSON schema (0, "", false, [] or {} by type)."""
    defaults = {"integer": 0, "number": 0, "string": "", "boolean": False, "array": [], "object": {}}
    props = (tool.parameters or {}).get("properties", {}) if tool is not None else {}
    return {name: defaults.get((spec or {}).get("type"), None) for name, spec in props.items()}


class Stepper(w.VBox):
    """Drive a live episode by hand: pick a tool and JSON arguments (or write a message) and step;
    let the model take a step; reset; verify. The viewer below follows the episode.

    ``Stepper(lab.episode(env, row, model=model))``, for either protocol: the episode is seeded
    (or reset) on creation; a Gymnasium episode has no verify (its rewards come with each step).
    Errors are shown in the widget (a click handler cannot raise into a cell).
    """

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
        for widget, name in (
            (self, "gl-stepper"),
            (self.tool, "gl-tool"),
            (self.arguments, "gl-arguments"),
            (self.text, "gl-text"),
            (self.step_button, "gl-step-button"),
            (self.model_button, "gl-model-button"),
            (self.reset_button, "gl-reset-button"),
            (self.verify_button, "gl-verify-button"),
            (self.message, "gl-message"),
        ):
            widget.add_class(name)
        self.tool.observe(lambda _: self._prefill(), names="value")
        self.step_button.on_click(lambda _: self._act(self._step))
        self.model_button.on_click(lambda _: self._act(self._model_step))
        self.reset_button.on_click(lambda _: self._act(self._reset))
        self.verify_button.on_click(lambda _: self._act(self._verify))
        buttons = w.HBox([self.step_button, self.model_button, self.reset_button, self.verify_button])
        super().__init__([w.HBox([self.tool, self.arguments]), self.text, buttons, self.message, self.viewer], **kwargs)
        self._prefill()
        self._act(self._start)

    # actions; each returns a short note for the message line
    def _start(self) -> str:
        if self.episode.done or self.episode._session.open:
            return ""
        if self._gymnasium:
            self.episode.reset()
            return "reset"
        self.episode.seed()
        return "seeded"

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
            if self._gymnasium:
                self.episode.step(NeMoGymResponse(model="by hand", output=[function_call(name, args)]))
            else:
                self.episode.call(name, **args)
            return f"called {name}"
        if not self.text.value:
            raise GymlabError("write a message, or pick a tool as the action")
        if self._gymnasium:
            self.episode.step(self.text.value)
        else:
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
            self.arguments.value = json.dumps(example_arguments(tool))


# -- the live collection panel ------------------------------------------------------------------


class LivePanel(w.VBox):
    """Progress, running mean reward and failures by kind while a run collects, redrawn at most
    every ``interval`` seconds (an ipywidgets update costs ~115 us; a run may finish thousands of
    episodes a second). ``panel.run(agent, rows, repeats=...)`` collects through ``gymlab.lab.runs``.
    """

    def __init__(
        self,
        total: int = 0,
        *,
        interval: float = 0.1,
        clock: Callable[[], float] = time.monotonic,
        description: str = "episodes",
        **kwargs: Any,
    ):
        self.progress = w.IntProgress(value=0, min=0, max=max(total, 1), description=description)
        self.summary = w.HTML()
        self.failures = w.HTML()
        for widget, name in (
            (self, "gl-live"),
            (self.progress, "gl-progress"),
            (self.summary, "gl-summary"),
            (self.failures, "gl-failures"),
        ):
            widget.add_class(name)
        super().__init__([self.progress, self.summary, self.failures], **kwargs)
        self.total, self.interval, self.clock = total, interval, clock
        self.done = 0
        self.reward_sum = 0.0
        self.kept = 0
        self.failed: Counter[str] = Counter()
        self.renders = 0
        self._last = float("-inf")
        self._lock = threading.Lock()
        self.render()

    @property
    def mean_reward(self) -> float:
        return self.reward_sum / self.kept if self.kept else float("nan")

    def add(self, record: Rollout) -> None:
        """Count one finished episode (masked ones count as failures of their kind, not in the mean)."""
        with self._lock:
            self.done += 1
            if record.mask_sample:
                self.failed[record.failure_kind or "masked"] += 1
            if not record.mask_sample:
                self.kept += 1
                self.reward_sum += record.reward
        self._maybe_render()

    def add_failure(self, kind: str) -> None:
        """Count one episode that produced no record of its own."""
        with self._lock:
            self.done += 1
            self.failed[kind] += 1
        self._maybe_render()

    def _maybe_render(self) -> None:
        now = self.clock()
        if now - self._last >= self.interval:
            self.render()

    def render(self) -> None:
        """Redraw now (``finish`` calls it; updates call it at most every ``interval``)."""
        with self._lock:
            self._last = self.clock()
            self.renders += 1
            self.progress.max = max(self.total, self.done, 1)
            self.progress.value = self.done
            mean = "–" if not self.kept else f"{self.mean_reward:.3f}"
            self.summary.value = (
                f"<span class='gl-done'>{self.done} of {self.total}</span> episodes · "
                f"<span class='gl-mean'>mean reward {mean}</span> over {self.kept} unmasked "
                "(masked and failed episodes are left out of the mean)"
            )
            rows = "".join(f"<tr><td>{html.escape(k)}</td><td>{n}</td></tr>" for k, n in self.failed.most_common())
            self.failures.value = (
                f"<table class='gl-failures-table'><tr><th>failure kind</th><th>episodes</th></tr>{rows}</table>"
                if rows
                else "no failures"
            )

    def finish(self) -> None:
        self.render()
        self.progress.bar_style = "danger" if self.failed else "success"

    async def arun(
        self,
        agent: Any,
        rows: list[dict[str, Any]],
        *,
        repeats: int = 1,
        concurrency: int = 16,
        env_name: str | None = None,
    ):
        """Collect with ``gymlab.lab.runs.arun_many``, counting each episode as it finishes."""
        from gymlab.lab.runs import arun_many

        self.total = len(rows) * repeats
        try:
            return await arun_many(
                _Observed(agent, self), rows, repeats=repeats, concurrency=concurrency, env_name=env_name
            )
        finally:
            self.finish()

    def run(
        self,
        agent: Any,
        rows: list[dict[str, Any]],
        *,
        repeats: int = 1,
        concurrency: int = 16,
        env_name: str | None = None,
    ):
        """Sync form of ``arun``; returns the ``Rollouts``."""
        from gymlab._sync import run_sync

        return run_sync(self.arun(agent, rows, repeats=repeats, concurrency=concurrency, env_name=env_name))


class _Observed:
    """An agent handle that reports each finished episode to a panel."""

    def __init__(self, agent: Any, panel: LivePanel):
        self._agent, self._panel = agent, panel
        self.name, self.server = agent.name, agent.server

    async def arun(self, row: dict[str, Any]) -> Rollout:
        from gymlab.errors import ServerError
        from gymlab.failures import run_failure

        try:
            record = await self._agent.arun(row)
        except ServerError as exc:
            self._panel.add_failure(run_failure(exc, self.name).kind)
            raise
        self._panel.add(record)
        return record
