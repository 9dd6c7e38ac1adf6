"""Sync calls of async code without patching any event loop.

Every sync helper runs its coroutine on one background event-loop thread owned by gymlab, whether
or not the caller's thread has a running loop (a Jupyter kernel does). Loop-bound clients are only
ever used on the loop that created them.
"""

from __future__ import annotations

import asyncio
import atexit
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_thread: threading.Thread | None = None


def background_loop() -> asyncio.AbstractEventLoop:
    global _loop, _thread
    with _lock:
        if _loop is None or _loop.is_closed() or not (_thread and _thread.is_alive()):
            _loop = asyncio.new_event_loop()
            _thread = threading.Thread(target=_loop.run_forever, name="gymlab-sync", daemon=True)
            _thread.start()
        return _loop


def run_sync(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run ``coro`` to completion from sync code, in a kernel, a script or a test."""
    loop = background_loop()
    if threading.current_thread() is _thread:
        coro.close()
        raise RuntimeError("run_sync called from gymlab's own loop thread; await the coroutine instead")
    return asyncio.run_coroutine_threadsafe(coro, loop).result(timeout)


async def on_background_loop(coro: Coroutine[Any, Any, T]) -> T:
    """Await ``coro`` from any event loop, running it on gymlab's loop.

    Handles' async methods use this, so a script's ``asyncio.run`` or a kernel's loop never owns a
    connection pool that outlives it.
    """
    loop = background_loop()
    try:
        running = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    if running is loop:
        return await coro
    return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coro, loop))


def _shutdown() -> None:
    global _loop
    loop = _loop
    if loop is None or loop.is_closed():
        return
    from gymlab.client import close_http_session

    try:
        asyncio.run_coroutine_threadsafe(close_http_session(), loop).result(5)
    except Exception:
        pass
    loop.call_soon_threadsafe(loop.stop)
    if _thread is not None:
        _thread.join(5)


atexit.register(_shutdown)
