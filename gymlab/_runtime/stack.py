"""The HTTP stack a server runs on: httptools and uvloop where installed, else h11 and asyncio
(``GYMLAB_SERVER_STACK=asyncio`` forces those, to compare the two)."""

from __future__ import annotations

import functools
import importlib
from typing import Any

from gymlab._sync import asyncio_forced


@functools.cache
def _has(module: str) -> bool:
    try:
        importlib.import_module(module)
    except ImportError:
        return False
    return True


def uvicorn_options() -> dict[str, Any]:
    """``uvicorn.Config`` options of every gymlab server: ``http`` and ``loop`` named, no proxy headers."""
    fast = not asyncio_forced()
    return {
        "http": "httptools" if fast and _has("httptools") else "h11",
        "loop": "uvloop" if fast and _has("uvloop") else "asyncio",
        "proxy_headers": False,
    }


def settle_heap() -> None:
    """Move what a server process holds before it serves out of the collector's sight (not in a Lab)."""
    import gc

    gc.collect()
    gc.freeze()
