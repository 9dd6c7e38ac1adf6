"""The HTTP stack a server runs on: httptools and uvloop where they are installed, else h11 and asyncio.

Both are dependencies where the platform has wheels (uvloop has none for Windows); without them a
server runs on uvicorn's pure-Python h11 parser and the standard loop, unchanged in behaviour.
``GYMLAB_SERVER_STACK=asyncio`` forces the fallback (to compare the two on one machine).
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import os
from typing import Any

#: Set to ``asyncio`` to serve on h11 and the standard event loop even when the fast stack is installed.
STACK_ENV = "GYMLAB_SERVER_STACK"


@functools.cache
def _has(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def fast() -> tuple[bool, bool]:
    """Whether (httptools, uvloop) are used."""
    if os.environ.get(STACK_ENV, "").strip().lower() == "asyncio":
        return False, False
    return _has("httptools"), _has("uvloop")


def uvicorn_options() -> dict[str, Any]:
    """``uvicorn.Config`` options of every gymlab server: ``http`` and ``loop`` named, not ``auto``, and no
    ``X-Forwarded-*`` rewriting (no gymlab server reads it; uvicorn's would wrap every request)."""
    httptools, uvloop = fast()
    return {
        "http": "httptools" if httptools else "h11",
        "loop": "uvloop" if uvloop else "asyncio",
        "proxy_headers": False,
    }


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A new event loop of the stack's kind (a server thread runs uvicorn on it)."""
    if fast()[1]:
        import uvloop

        return uvloop.new_event_loop()
    return asyncio.new_event_loop()


def settle_heap() -> None:
    """Move everything a server process holds before it serves (the framework, schemas, routes) out of
    the garbage collector's sight, so no collection walks them; for server processes only, not a Lab's."""
    import gc

    gc.collect()
    gc.freeze()
