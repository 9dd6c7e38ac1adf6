"""Sync calls of async code without patching any event loop: coroutines run on gymlab's background loop."""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import functools
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None


#: Set to ``asyncio`` to serve on h11 and the standard event loop even when the fast stack is installed.
STACK_ENV = "GYMLAB_SERVER_STACK"


def asyncio_forced() -> bool:
    """Whether ``STACK_ENV`` forces the fallback stack (to compare the two)."""
    return os.environ.get(STACK_ENV, "").strip().lower() == "asyncio"


def new_event_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop where it is installed (every server and client call runs on one), else asyncio's."""
    if asyncio_forced():
        return asyncio.new_event_loop()
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def background_loop() -> asyncio.AbstractEventLoop:
    global _loop, _thread
    with _lock:
        if _loop is None or _loop.is_closed() or not (_thread and _thread.is_alive()):
            _loop = new_event_loop()
            _thread = threading.Thread(target=_loop.run_forever, name="gymlab-sync", daemon=True)
            _thread.start()
        return _loop


#: Seconds an interrupted call may take to cancel its work (close sessions) before the interrupt returns.
CANCEL_GRACE_S = 15.0


def run_sync(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run ``coro`` from sync code; an interrupt cancels it (cleanup first), errors keep only the user's frames."""
    __tracebackhide__ = True  # IPython and pytest skip this frame
    loop = background_loop()
    if threading.current_thread() is _thread:
        coro.close()
        raise RuntimeError("run_sync called from gymlab's own loop thread; await the coroutine instead")
    ended = threading.Event()

    async def tracked() -> T:
        try:
            return await coro
        finally:
            ended.set()

    future = asyncio.run_coroutine_threadsafe(tracked(), loop)
    try:
        return future.result(timeout)
    except KeyboardInterrupt:
        future.cancel()
        ended.wait(CANCEL_GRACE_S)
        raise
    except concurrent.futures.CancelledError:  # cancelled on the loop (``lab.cancel()``)
        raise asyncio.CancelledError("cancelled on gymlab's loop") from None
    except BaseException as exc:
        raise for_caller(exc)  # noqa: B904 (the same exception, its traceback trimmed)


def for_caller(exc: BaseException) -> BaseException:
    """``exc`` with only the user's frames; gymlab's own errors drop their chain (their message says it all)."""
    from gymlab._traces import ipython_shell, user_frames, user_traceback
    from gymlab.errors import GymlabError

    if isinstance(exc, GymlabError):
        exc.__cause__, exc.__suppress_context__ = None, True
    if ipython_shell() is not None:  # in IPython, which would show run_sync's frame: the user's frames only
        exc._render_traceback_ = functools.partial(user_frames, exc)
    return exc.with_traceback(user_traceback(exc.__traceback__))


async def on_background_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Await ``coro`` on gymlab's loop from any loop (no caller's loop owns a pool that outlives it)."""
    loop = background_loop()
    if asyncio.get_running_loop() is loop:
        return await coro
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))


def _shutdown() -> None:
    loop = _loop
    if loop is None or loop.is_closed():
        return
    loop.call_soon_threadsafe(loop.stop)
    if _thread is not None:
        _thread.join(5)


atexit.register(_shutdown)
