"""HFModel's batches: requests gathered within ``batch_window_ms``, generated in one worker thread."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import contextvars
import functools
import threading
import time
import weakref
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gymlab.models.policy import DaemonThreads


@dataclass(eq=False)
class Row:
    """One request in a batch: its prompt token ids and sampling, and what generation gave it."""

    prompt: list[int]
    temperature: float
    top_p: float
    max_new: int
    deadline: float  # time.monotonic() past which the row stops with "timeout"
    future: asyncio.Future | None = None
    cancelled: bool = False
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: str = ""  # why it stopped: "stop" (end of turn), "length", "timeout" or "cancelled"

    @property
    def sampling(self) -> tuple[bool, float, float]:
        """Rows with equal keys share one ``generate`` call (greedy when the temperature is 0)."""
        greedy = self.temperature == 0
        return (not greedy, 1.0 if greedy else self.temperature, 1.0 if greedy else self.top_p)


#: How much longer than its window a batch waits for requests already received (being tokenized).
ARRIVING_S = 0.1


class QueueFull(Exception):
    """The server already holds ``max_queue`` waiting requests."""


class Closed(Exception):
    """The server closed before the row was generated."""


class Batcher:
    """Gathers rows on the serving loop and generates each batch in one thread; a stopped row is answered."""

    def __init__(
        self,
        generate: Callable[[list[Row], threading.Event, Callable[[Row], object]], None],
        *,
        window_s: float,
        max_batch: int,
        max_queue: int,
        threads: int | None = None,
    ):
        self.generate, self.window_s, self.max_batch, self.max_queue = generate, window_s, max_batch, max_queue
        self.threads = threads  # torch threads of the worker thread
        self.stop = threading.Event()
        self.batches = 0  # generate calls made (a batch of several sampling settings is one)
        self.batch_sizes: list[int] = []  # the last 1000 batches' sizes
        self.finished: Counter[str] = Counter()  # rows by how they ended
        self.in_flight = 0  # rows taken and not yet answered
        self.arriving = 0  # requests received and not yet queued (``CountArrivals``): a batch waits for them a little
        self._worker = DaemonThreads(1, "gymlab-hf-generate")  # one batch at a time
        self._queue: asyncio.Queue = asyncio.Queue()  # bound to the serving loop at its first wait
        self._task: asyncio.Task | None = None

    def submit(self, row: Row) -> None:
        """Queue ``row`` (on the serving loop); ``QueueFull`` past ``max_queue``, ``Closed`` once closing."""
        if self.stop.is_set():
            raise Closed("the model server is closing")
        if self._task is None:
            _open.add(self)
            self._task = asyncio.get_running_loop().create_task(self._dispatch())
        if self._queue.qsize() >= self.max_queue:
            raise QueueFull
        row.future = asyncio.get_running_loop().create_future()
        self._queue.put_nowait(row)
        self.in_flight += 1
        if (arrived := _arrival.get()) is not None:
            arrived()

    def release(self, row: Row) -> None:
        """The caller of a submitted row is done with it: unanswered, it is dropped at its next token."""
        if not row.future.done() or row.future.cancelled():
            row.cancelled = True
        self.in_flight -= 1

    async def _gather(self) -> list[Row]:
        """A batch: the first row and those queued within the window, stretched while requests still arrive."""
        queue, loop = self._queue, asyncio.get_running_loop()
        batch = [await queue.get()]
        start = loop.time()
        while len(batch) < self.max_batch:
            now = loop.time()
            left = start + self.window_s - now
            if left <= 0 and self.arriving and now < start + self.window_s + ARRIVING_S:
                left = 0.002  # look again shortly: the arriving ones join, a refused one stops being counted
            if left <= 0 and queue.empty():
                break
            with contextlib.suppress(TimeoutError):
                batch.append(queue.get_nowait() if not queue.empty() else await asyncio.wait_for(queue.get(), left))
        return batch

    async def _dispatch(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            batch = await self._gather()
            now = time.monotonic()
            live = []
            for row in batch:
                if row.cancelled or row.future.done():  # its caller left while it waited
                    self.finished["cancelled"] += 1
                elif now >= row.deadline:  # waited out its budget in the queue
                    row.finish = "timeout"
                    self._answer(row)
                else:
                    live.append(row)
            if not live:
                continue
            self.batches += 1
            self.batch_sizes = [*self.batch_sizes[-999:], len(live)]
            try:
                await self._worker.run(functools.partial(self._generate, live, loop))
            except BaseException as exc:  # every caller of the batch still waiting gets the failure, or Closed
                failure = exc if isinstance(exc, Exception) else Closed("the model server closed")
                for row in live:
                    if not row.future.done():
                        row.future.set_exception(failure)
                if failure is not exc:
                    raise

    def _answer(self, row: Row) -> None:
        """A row that stopped, answered on the loop while its batch goes on."""
        self.finished[row.finish] += 1
        if not row.future.done():
            row.future.set_result(row)

    async def close(self) -> None:
        """Stop the batch running at its next token, fail the waiting rows, free the worker thread."""
        self.stop.set()
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):  # closing anyway
                await self._task
        while not self._queue.empty():
            row = self._queue.get_nowait()
            if not row.future.done():
                row.future.set_exception(Closed("the model server closed"))
        self._worker.shutdown()

    def _generate(self, rows: list[Row], loop: asyncio.AbstractEventLoop) -> None:
        """One batch, on the worker thread (a daemon: a generation in flight never holds the process open)."""
        if self.threads:
            import torch

            torch.set_num_threads(self.threads)  # OpenMP's setting is per thread: this thread's alone
        self.generate(rows, self.stop, lambda row: loop.call_soon_threadsafe(self._answer, row))

    def join(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for the worker thread to end (after ``close``); whether it has."""
        return self._worker.join(timeout)


#: Set by ``CountArrivals`` for the request being handled: marks it arrived (queued) once.
_arrival: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar("gymlab_hf_arrival", default=None)


class CountArrivals:
    """ASGI middleware: a request to ``path`` counts in ``batcher.arriving`` until queued, so a batch waits it."""

    def __init__(self, app, batcher: Batcher, path: str = "/v1/responses"):
        self.app, self.batcher, self.path = app, batcher, path

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] != self.path:
            return await self.app(scope, receive, send)
        batcher, counted = self.batcher, True
        batcher.arriving += 1

        def arrived() -> None:
            nonlocal counted
            if counted:
                counted, batcher.arriving = False, batcher.arriving - 1

        token = _arrival.set(arrived)
        try:
            await self.app(scope, receive, send)
        finally:
            arrived()
            _arrival.reset(token)


_open: weakref.WeakSet[Batcher] = weakref.WeakSet()


@atexit.register
def _stop_all() -> None:
    """At exit, a batch still generating (its server never shut down) stops at its next token."""
    for batcher in list(_open):
        batcher.stop.set()
        batcher._worker.shutdown()
    for batcher in list(_open):
        batcher.join(5.0)


def generate_rows(
    model: Any, eos: set[int], pad: int, rows: list[Row], stop: threading.Event, done: Callable[[Row], object]
) -> None:
    """Generate ``rows`` (worker thread): one ``generate`` per sampling setting; ``done(row)`` once a row stops."""
    groups: dict[tuple, list[Row]] = {}
    for row in rows:
        groups.setdefault(row.sampling, []).append(row)
    for group in groups.values():
        _generate(model, eos, pad, group, stop, done)


def _generate(model, eos, pad, rows, stop, done) -> None:
    import torch
    from transformers import (
        GenerationConfig,
        LogitsProcessor,
        LogitsProcessorList,
        StoppingCriteria,
        StoppingCriteriaList,
        TemperatureLogitsWarper,
        TopPLogitsWarper,
    )

    sample, temperature, top_p = rows[0].sampling
    width = max(len(r.prompt) for r in rows)
    ids = torch.tensor([[pad] * (width - len(r.prompt)) + r.prompt for r in rows])
    mask = torch.tensor([[0] * (width - len(r.prompt)) + [1] * len(r.prompt) for r in rows])
    steps: list[Any] = []  # per token: the sampled tokens' raw log-probabilities, one per row
    ended = [False] * len(rows)
    raw: list[Any] = [None]

    class Raw(LogitsProcessor):
        """First in the list: the model's own distribution, before temperature and top_p."""

        def __call__(self, input_ids, scores):
            raw[0] = torch.log_softmax(scores.float(), dim=-1)
            return scores

    def end(i: int, input_ids: Any, why: str) -> None:
        row, n = rows[i], input_ids.shape[1] - width
        row.tokens = input_ids[i, width:].tolist()
        row.logprobs = [float(step[i]) for step in steps[:n]]
        row.finish, ended[i] = why, True
        done(row)

    class Each(StoppingCriteria):
        """After each token: its log-probability, and which rows are done (answered now; the others go on)."""

        def __call__(self, input_ids, scores, **kwargs):
            token = input_ids[:, -1]
            steps.append(raw[0].gather(1, token[:, None]).squeeze(1))
            n, now, stopped = input_ids.shape[1] - width, time.monotonic(), stop.is_set()
            for i, row in enumerate(rows):
                if ended[i]:
                    continue
                if int(token[i]) in eos:
                    end(i, input_ids, "stop")
                elif row.cancelled or stopped:
                    end(i, input_ids, "cancelled")
                elif now >= row.deadline:
                    end(i, input_ids, "timeout")
                elif n >= row.max_new:
                    end(i, input_ids, "length")
            return torch.tensor(ended, device=input_ids.device)

    processors: list[Any] = [Raw()]
    if sample and temperature != 1.0:
        processors.append(TemperatureLogitsWarper(temperature))
    if sample and top_p < 1.0:
        processors.append(TopPLogitsWarper(top_p))
    config = GenerationConfig(
        max_new_tokens=max(r.max_new for r in rows),
        do_sample=sample,
        top_k=0 if sample else None,  # no top-k unless asked (a model's generation_config may default to 50)
        pad_token_id=pad,
        eos_token_id=sorted(eos),
    )
    device = next(model.parameters()).device
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            generation_config=config,
            logits_processor=LogitsProcessorList(processors),
            stopping_criteria=StoppingCriteriaList([Each()]),
        )
    for i in range(len(rows)):
        if not ended[i]:  # generate stopped before its last criterion call (never expected)
            end(i, out, "length")
