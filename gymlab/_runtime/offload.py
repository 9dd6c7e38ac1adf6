"""``WorkerPool``: CPU-heavy work in worker processes (off the server's GIL), each call within a time
budget past which its worker is killed; functions and arguments go by pickle (docs/servers.md)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import multiprocessing
import os
import pickle
import queue
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

from gymlab.errors import WorkBudgetExceeded, WorkerDied

#: How long a worker may take to load a call (import its function's module) before its budget starts.
_LOAD_TIMEOUT_S = 120.0
_LOADED = "loaded"


class WorkerPool:
    """``workers`` worker processes, started when first used; one past ``recycle_rss_bytes`` exits after answering."""

    def __init__(self, workers: int, *, name: str, recycle_rss_bytes: int | None = None):
        self.workers, self.name, self.recycle_rss_bytes = int(workers), name, recycle_rss_bytes
        self._tasks: queue.SimpleQueue = queue.SimpleQueue()
        self._slots: list[_Slot] = []
        self._lock = threading.Lock()
        self._finalizer = weakref.finalize(self, _stop, self._tasks, self._slots)

    async def run(
        self,
        fn: Callable[..., Any],
        *args: Any,
        budget_s: float,
        prepare: tuple | None = None,
        prepare_s: float = 120.0,
    ) -> Any:
        """``fn(*args)`` in a worker (``WorkBudgetExceeded`` past ``budget_s``, ``WorkerDied``); ``prepare``:
        ``(function, *arguments)`` run first there within ``prepare_s``."""
        self._start_threads()
        task: concurrent.futures.Future = concurrent.futures.Future()  # cancelled with its caller: never run
        self._tasks.put((task, (prepare, fn, args), float(budget_s), float(prepare_s)))
        return await asyncio.wrap_future(task)

    def busy(self) -> int:
        return sum(slot.busy for slot in self._slots)

    def close(self) -> None:
        self._finalizer()

    def _start_threads(self) -> None:
        with self._lock:
            if self._slots or not self._finalizer.alive:
                return
            for i in range(self.workers):
                slot = _Slot(f"{self.name}-worker-{i}", self.recycle_rss_bytes)
                self._slots.append(slot)
                threading.Thread(target=_serve_tasks, args=(self._tasks, slot), name=slot.name, daemon=True).start()


def _serve_tasks(tasks: queue.SimpleQueue, slot: _Slot) -> None:
    while (item := tasks.get()) is not None:
        task, call, budget_s, prepare_s = item
        if not task.set_running_or_notify_cancel():
            continue
        try:
            task.set_result(slot.call(call, budget_s, prepare_s))
        except BaseException as exc:  # handed to the caller as is
            task.set_exception(exc)
    slot.stop()


def _stop(tasks: queue.SimpleQueue, slots: list[_Slot]) -> None:
    for slot in slots:
        tasks.put(None)
        slot.stop()


class _Slot:
    """One worker process and the pipe to it."""

    def __init__(self, name: str, recycle_rss_bytes: int | None):
        self.name, self.recycle_rss_bytes = name, recycle_rss_bytes
        self.process: Any = None
        self.conn: Any = None
        self.busy = False
        self.lock = threading.Lock()

    def call(self, call: tuple, budget_s: float, prepare_s: float) -> Any:
        prepare, fn, _ = call
        try:
            payload = pickle.dumps(call)
        except Exception as exc:
            raise TypeError(
                f"{self.name}: {getattr(fn, '__qualname__', fn)!r} or its arguments cannot go to a worker process "
                f"({type(exc).__name__}: {exc}); give a function defined at the top level of an importable module"
            ) from None
        if self.process is None or not self.process.is_alive():
            self._start()
        self.busy = True
        started = time.monotonic()
        try:
            self.conn.send_bytes(payload)
            # the budget starts once the worker has the call and has prepared (a fresh worker imports modules first)
            loaded = self.conn.poll(prepare_s + _LOAD_TIMEOUT_S * (prepare is None)) and self.conn.recv() == _LOADED
            answered = loaded and self.conn.poll(budget_s)
            if answered:
                ok, value, recycle = self.conn.recv()
        except (EOFError, OSError) as exc:
            process = self.process
            if process is not None:
                process.join(1)  # reaped, so its exit code tells how it ended
            code = process.exitcode if process is not None else None
            self.stop()
            raise WorkerDied(
                f"{self.name}: the worker process died after {time.monotonic() - started:.1f} s of "
                f"{getattr(fn, '__qualname__', fn)} (exit code {code}: killed from outside, or out of memory; "
                f"{type(exc).__name__})"
            ) from None
        finally:
            self.busy = False
        if not answered:
            self.stop()
            what, budget = (fn, budget_s) if loaded else (prepare[0] if prepare else "loading the call", prepare_s)
            what = getattr(what, "__qualname__", what)
            message = f"{self.name}: {what} ran past its budget of {budget:g} s (its worker was stopped)"
            raise WorkBudgetExceeded(message, budget, "work" if loaded else "prepare")
        if recycle:
            self.stop()
        if not ok:
            raise value
        return value

    def _start(self) -> None:
        context = multiprocessing.get_context("forkserver" if os.name == "posix" else "spawn")
        self.conn, child = context.Pipe()
        self.process = context.Process(
            target=_worker, args=(child, self.recycle_rss_bytes), name=self.name, daemon=True
        )
        self.process.start()
        child.close()

    def stop(self) -> None:
        with self.lock:  # the pool thread and a close may both stop it
            process, conn, self.process, self.conn = self.process, self.conn, None, None
        if process is not None and process.is_alive():
            process.kill()
            process.join(5)
        if conn is not None:
            conn.close()


def _worker(conn: Any, recycle_rss_bytes: int | None) -> None:
    while True:
        try:
            payload = conn.recv_bytes()
        except (EOFError, OSError):
            return
        try:
            prepare, fn, args = pickle.loads(payload)
            if prepare is not None:
                prepare[0](*prepare[1:])
        except BaseException as exc:  # the function's module does not import here, or preparing raised
            conn.send(_LOADED)
            conn.send((False, exc, False))
            continue
        conn.send(_LOADED)
        try:
            ok, value = True, fn(*args)
        except BaseException as exc:
            ok, value = False, exc
        recycle = recycle_rss_bytes is not None and rss_bytes() > recycle_rss_bytes
        try:
            conn.send((ok, value, recycle))
        except Exception as exc:  # an unpicklable result or exception: its text instead
            conn.send((False, RuntimeError(f"{type(value).__name__}: {value} (not picklable: {exc})"), recycle))
        if recycle:
            return


def rss_bytes() -> int:
    """This process's resident memory (0 without /proc)."""
    try:
        with open("/proc/self/statm", "rb") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0
