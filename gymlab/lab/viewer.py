"""The episode viewer: one episode step by step (chat bubbles, a reward sparkline, a step slider), or
every episode of a run, filtered by reward, task and failure kind (``RunFilter``, plain Python) and browsed."""

from __future__ import annotations

import html
import operator
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import ipywidgets as w

from gymlab.lab.display import clip, conversation, episode_steps, flags
from gymlab.models.chat_convert import prompt_items
from gymlab.protocol import Message, Rollout, StepRecord
from gymlab.protocol.record import failure_counts, own_fields

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


def add_classes(owner: w.DOMWidget, own: str, names: str) -> None:
    """``own`` on ``owner``, ``gl-<name>`` on each of its widgets ``names`` lists (hooks for CSS and browser tests)."""
    owner.add_class(own)
    for name in names.split():
        getattr(owner, name).add_class("gl-" + name.replace("_", "-"))


def _as_rollout(source: Any) -> Rollout:
    record = source if isinstance(source, Rollout | dict) else getattr(source, "rollout", None)  # an episode's
    if isinstance(record, Rollout | dict):
        return Rollout.model_validate(record)
    raise TypeError(f"a viewer shows a Rollout, a rollout dict or an episode, not {type(source).__name__}")


#: (class, label) of a bubble by ``conversation``'s who; another is a system message's, or an item's.
_BUBBLE = {"call": ("gl-call", "tool call"), "output": ("gl-output", "tool output"), "observation": ("gl-user", "user")}
_BUBBLE |= {name: (f"gl-{name}", name) for name in ("user", "assistant", "reasoning")}


def _bubble(who: str, text: str, now: bool) -> str:
    cls, who = _BUBBLE.get(who, ("gl-system" if who in ("system", "developer") else "gl-assistant", who))
    return f"<div class='gl-b {cls}{' gl-now' * now}'><span class='gl-who'>{html.escape(who)}</span>{html.escape(text)}</div>"


def conversation_html(record: Rollout, upto: int) -> str:
    """The prompt and steps ``0..upto`` as chat bubbles; step ``upto``'s items are outlined."""
    parts = [_bubble(who, text, step == upto) for who, text, step in conversation(record, upto)]
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


ANY = "*"  #: a filter's "no condition" value (None would read as "nothing selected" in a Dropdown)
_COMPARE = {"=": operator.eq, ">=": operator.ge, "<": operator.lt}  # a reward filter's conditions
_MAX_REWARD_VALUES = 12  # more distinct rewards than this are offered as above/below the mean


def failure_of(record: Rollout) -> str:
    """The failure kind a record counts under (``failure_counts``' rule): "" when it is not masked."""
    return next(iter(failure_counts([record])), "")


def _prompt_snippet(record: Rollout, width: int = 40) -> str:
    users = [i for i in prompt_items(record.responses_create_params) if isinstance(i, Message) and i.role == "user"]
    return clip(" ".join(users[-1].text.split()) if users else "", width)


def _task_names(first: dict[Any, Rollout]) -> dict[Any, str]:
    """What tells each task apart: the start of its prompt, or, when prompts share a template (their
    starts agree), the row field whose values differ most between the tasks (``secret=42``)."""
    snippets = {t: _prompt_snippet(r) for t, r in first.items()}
    if len(set(snippets.values())) == len(snippets):
        return snippets
    own = {t: own_fields(r.model_extra or {}) for t, r in first.items()}
    keys = list(dict.fromkeys(k for fields in own.values() for k in fields))
    spread = {k: len({repr(fields.get(k)) for fields in own.values()}) for k in keys}
    key = max(keys, key=lambda k: spread[k], default=None)  # the first of the most varied, in row order
    if key is None or spread[key] < 2:
        return snippets
    return {t: clip(f"{key}={own[t].get(key)!r} · {snippets[t]}", 60) for t in first}


def _task_order(task: Any) -> tuple:
    return (0, task, "") if isinstance(task, int | float) else (1, 0, str(task))


class RunFilter:
    """The episodes of a run that match a reward (``("=", v)``, ``(">=", v)``, ``("<", v)``), a task (a
    ``_ng_task_index``) and a failure kind (``""``: not masked); ``ANY`` matches all. And the options offered."""

    def __init__(self, records: Sequence[Rollout]):
        self.records = list(records)

    def reward_options(self) -> list[tuple[str, Any]]:
        counts = Counter(r.reward for r in self.records)
        if len(counts) <= _MAX_REWARD_VALUES:
            return [("any reward", ANY)] + [(f"reward {v:g} ({n})", ("=", v)) for v, n in sorted(counts.items())]
        mean = sum(v * n for v, n in counts.items()) / len(self.records)
        above = sum(n for v, n in counts.items() if v >= mean)
        return [
            ("any reward", ANY),
            (f"reward ≥ {mean:.3g} ({above})", (">=", mean)),
            (f"reward < {mean:.3g} ({len(self.records) - above})", ("<", mean)),
        ]

    def task_options(self) -> list[tuple[str, Any]]:
        first: dict[Any, Rollout] = {}
        for r in self.records:
            if r.task_index is not None:
                first.setdefault(r.task_index, r)
        counts = Counter(r.task_index for r in self.records)
        names = _task_names(first)
        return [("every task", ANY)] + [
            (f"task {t} ({counts[t]}): {names[t]}", t) for t in sorted(first, key=_task_order)
        ]

    def failure_options(self) -> list[tuple[str, Any]]:
        kinds = failure_counts(self.records)
        clean = len(self.records) - sum(kinds.values())
        return [("any outcome", ANY), (f"no failure ({clean})", "")] + [(f"{k} ({n})", k) for k, n in kinds.items()]

    def match(self, reward: Any = ANY, task: Any = ANY, failure: Any = ANY) -> list[int]:
        """Indices of the matching records, in run order."""
        return [
            i
            for i, r in enumerate(self.records)
            if (reward == ANY or _COMPARE[reward[0]](r.reward, reward[1]))
            and (task == ANY or r.task_index == task)
            and (failure == ANY or failure_of(r) == failure)
        ]

    def label(self, i: int) -> str:
        """One line for the episode picker: position, task, repeat, reward and failure kind."""
        r = self.records[i]
        n = len(episode_steps(r))
        task = f"task {r.task_index}" if r.task_index is not None else ""
        repeat = f"repeat {r.repeat}" if r.repeat is not None else ""
        parts = [f"#{i}", task, repeat, f"reward {r.reward:g}", f"{n} step{'s' * (n != 1)}", failure_of(r)]
        return " · ".join(p for p in parts if p)


class EpisodeViewer(w.VBox):
    """An episode step by step (a ``Rollout``, a rollout dict or a live episode), or a run (``Rollouts`` or
    a list of records) whose episodes a bar above filters and picks. ``.load(source)`` shows another;
    ``.filter(reward=1.0, task=0, failure="timeout")`` sets the filters; ``.step`` is the shown step (from
    0, as a ``StepRecord.index`` and the steps frame count), ``.index`` the shown episode's place in the run."""

    def __init__(self, source: Any = None, step: int | None = None, **kwargs: Any):
        self.prev = w.Button(description="◀ prev", layout=w.Layout(width="80px"))
        self.next = w.Button(description="next ▶", layout=w.Layout(width="80px"))
        self.slider = w.IntSlider(min=0, max=0, value=0, description="step", continuous_update=True)
        self.status = w.HTML()
        self.sparkline = w.HTML()
        self.conversation = w.HTML()
        self.reward_filter = w.Dropdown(description="reward", options=[("any reward", ANY)])
        self.task_filter = w.Dropdown(description="task", options=[("every task", ANY)])
        self.failure_filter = w.Dropdown(description="failure", options=[("any outcome", ANY)])
        self.episode = w.Dropdown(description="episode", options=[], layout=w.Layout(width="460px"))
        self.prev_episode = w.Button(description="◀", layout=w.Layout(width="40px"), tooltip="previous episode")
        self.next_episode = w.Button(description="▶", layout=w.Layout(width="40px"), tooltip="next episode")
        self.matches = w.HTML()
        self.run_bar = w.VBox(
            [
                w.HBox([self.reward_filter, self.task_filter, self.failure_filter]),
                w.HBox([self.prev_episode, self.episode, self.next_episode, self.matches]),
            ],
            layout=w.Layout(display="none"),
        )
        self.run_bar.add_class("gl-run")
        self._filters = (self.reward_filter, self.task_filter, self.failure_filter)
        add_classes(
            self,
            "gl-viewer",
            "prev next slider status sparkline conversation reward_filter task_filter failure_filter episode "
            "prev_episode next_episode matches",
        )
        self.prev.on_click(lambda _: self._move(-1))
        self.next.on_click(lambda _: self._move(+1))
        self.slider.observe(lambda change: self._render(), names="value")
        for dropdown in self._filters:
            dropdown.observe(lambda change: self._refilter(), names="value")
        self.episode.observe(lambda change: self._pick(), names="value")
        self.prev_episode.on_click(lambda _: self._move_episode(-1))
        self.next_episode.on_click(lambda _: self._move_episode(+1))
        controls = w.HBox([self.prev, self.slider, self.next, self.sparkline])
        super().__init__([self.run_bar, controls, self.status, self.conversation], **kwargs)
        self.record: Rollout | None = None
        self.steps: list[StepRecord] = []
        self.rollouts: list[Rollout] = []
        self.shown: list[int] = []  # the run's episodes that match the filters (their indices)
        self._run = RunFilter([])
        self._quiet = False
        self._note = ""
        if source is not None:
            self.load(source, step)

    def load(self, source: Any, step: int | None = None) -> EpisodeViewer:
        """Show ``source`` (an episode or a run) at ``step`` (from 0; default: the episode's last step)."""
        if isinstance(source, Sequence) and not isinstance(source, str | bytes):  # a run: records or Rollouts
            self.rollouts = [_as_rollout(r) for r in source]
            self._run = RunFilter(self.rollouts)
            options = (self._run.reward_options(), self._run.task_options(), self._run.failure_options())
            with self._quietly():
                for dropdown, offered in zip(self._filters, options):
                    dropdown.options, dropdown.value = offered, ANY
            self.run_bar.layout.display = ""
            self._refilter(step, keep=False)
            return self
        return self._show(_as_rollout(source), step)

    def filter(self, *, reward: Any = ANY, task: Any = ANY, failure: Any = ANY) -> EpisodeViewer:
        """Set the run bar's filters: ``reward`` a value or a condition, ``task`` an index, ``failure`` a kind
        (``""``: episodes without one); each must be one the bar offers (``ValueError`` names the choices)."""
        if isinstance(reward, int | float):
            reward = ("=", float(reward))
        with self._quietly():
            for dropdown, value in zip(self._filters, (reward, task, failure)):
                offered = [v for _, v in dropdown.options]
                if value not in offered:
                    raise ValueError(
                        f"{dropdown.description} filter {value!r} is not offered by this run; choose one of {offered}"
                    )
                dropdown.value = value
        self._refilter()
        return self

    @contextmanager
    def _quietly(self) -> Iterator[None]:
        """While the bar's options or values are set, their observers do nothing."""
        self._quiet = True
        try:
            yield
        finally:
            self._quiet = False

    @property
    def step(self) -> int:
        return self.slider.value

    @property
    def index(self) -> int | None:
        """The shown episode's position in the run (None when no run is loaded or nothing matches)."""
        return self.episode.value if self.rollouts else None

    def _show(self, record: Rollout, step: int | None = None) -> EpisodeViewer:
        self.record = record
        self.steps = episode_steps(record)
        self._set_range(len(self.steps), step)
        return self

    def _set_range(self, n: int, step: int | None) -> None:
        last = max(n - 1, 0)  # steps 0..n-1; the slider's min stays 0
        target = last if step is None else max(0, min(step, last))
        # The browser applies "value" before "max" and sends back a value it clamped (one {value: 3, max: 3}
        # became 2): widen the range in a message of its own, then move the value, then narrow the range.
        if last > self.slider.max:
            self.slider.max = last
        self.slider.value = target
        self.slider.max = last
        self.slider.disabled = n <= 1
        self._render()

    def _refilter(self, step: int | None = None, keep: bool = True) -> None:
        if self._quiet or not self.rollouts:
            return
        self.shown = self._run.match(self.reward_filter.value, self.task_filter.value, self.failure_filter.value)
        current = self.episode.value if keep else None
        chosen = current if current in self.shown else (self.shown[0] if self.shown else None)
        with self._quietly():
            self.episode.options = [(self._run.label(i), i) for i in self.shown]
            self.episode.value = chosen
        if chosen is None:
            self.record, self.steps, self._note = None, [], "no episode of this run matches the filters"
            self._set_range(0, None)
        else:
            self._note = ""
            self._show(self.rollouts[chosen], step)
        self._update_bar()

    def _pick(self) -> None:
        if self._quiet or self.episode.value is None:
            return
        self._show(self.rollouts[self.episode.value])
        self._update_bar()

    def _move_episode(self, delta: int) -> None:
        if self.episode.value in self.shown:
            k = self.shown.index(self.episode.value) + delta
            self.episode.value = self.shown[max(0, min(len(self.shown) - 1, k))]

    def _update_bar(self) -> None:
        position = self.shown.index(self.episode.value) if self.episode.value in self.shown else None
        self.prev_episode.disabled = not position
        self.next_episode.disabled = position is None or position >= len(self.shown) - 1
        where = f"episode {position + 1} of {len(self.shown)} shown · " if position is not None else ""
        self.matches.value = (
            f"<span class='gl-match-count'>{where}{len(self.shown)} of {len(self.rollouts)} episodes match</span>"
        )

    def _move(self, delta: int) -> None:
        self.slider.value = max(self.slider.min, min(self.slider.max, self.slider.value + delta))

    def _render(self) -> None:
        if self.record is None:
            self.prev.disabled = self.next.disabled = True
            self.sparkline.value = ""
            self.status.value = f"<span class='gl-step'>{html.escape(self._note)}</span>" if self._note else ""
            self.conversation.value = ""
            return
        n, k = len(self.steps), self.slider.value
        rewards = [s.reward for s in self.steps]
        self.prev.disabled = k <= 0
        self.next.disabled = k >= n - 1
        self.sparkline.value = sparkline_svg(rewards, k if n else None)
        self.conversation.value = conversation_html(self.record, k if n else -1)
        masked = ""
        if self.record.mask_sample:
            stage = f" at {self.record.failure_stage}" if self.record.failure_stage else ""
            reason = (self.record.failure_reason or "")[:300]
            masked = f" · <span class='gl-masked'>masked: {html.escape(failure_of(self.record) + stage)}</span>"
            masked += f"<div class='gl-err'>{html.escape(reason)}</div>" if reason else ""
        if not n:
            self.status.value = (
                f"<span class='gl-step'>no steps{'' if masked else ' yet'}</span> · "
                f"total reward {self.record.reward:g}{masked}"
            )
            return
        cumulative = sum(rewards[: k + 1])
        self.status.value = (
            f"<span class='gl-step'>step {k} of 0–{n - 1}</span> · "
            f"<span class='gl-reward'>reward {rewards[k]:g}</span> · "
            f"cumulative {cumulative:g} · episode reward {self.record.reward:g}{flags(self.steps[k], ' · ')}{masked}"
        )
