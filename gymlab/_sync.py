"""Sync calls of async code without patching any event loop: every sync helper runs its coroutine on
gymlab's one background loop thread, whether or not the caller's thread runs a loop (a kernel does)."""

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


def _new_loop() -> asyncio.AbstractEventLoop:
    """uvloop's loop where it is installed (every Lab server and client call runs on it), else asyncio's."""
    if os.environ.get("GYMLAB_SERVER_STACK") == "asyncio":  # the fallback stack, forced (to compare)
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
            _loop = _new_loop()
            _thread = threading.Thread(target=_loop.run_forever, name="gymlab-sync", daemon=True)
            _thread.start()
        return _loop


#: Seconds an interrupted call may take to cancel its work (close sessions) before the interrupt returns.
CANCEL_GRACE_S = 15.0


def run_sync(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run ``coro`` to completion from sync code. An interrupt cancels the work itself (its cleanup runs
    before ``KeyboardInterrupt`` reaches the caller); an error comes back with only the user's frames."""
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
    """``exc`` with only the user's frames in its traceback (in IPython, as shown too); gymlab's own
    errors drop their chain (their message already names server, route and cause)."""
    from gymlab._traces import ipython_shell, user_frames, user_traceback
    from gymlab.errors import GymlabError

    if isinstance(exc, GymlabError):
        exc.__cause__, exc.__suppress_context__ = None, True
    if ipython_shell() is not None:  # in IPython, which would show run_sync's frame: the user's frames only
        exc._render_traceback_ = functools.partial(user_frames, exc)
    return exc.with_traceback(user_traceback(exc.__traceback__))


async def on_background_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Await ``coro`` from any event loop, running it on gymlab's loop (so no caller's loop owns a
    connection pool that outlives it)."""
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
