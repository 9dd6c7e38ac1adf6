"""The HTTP stack a server runs on: httptools and uvloop where installed, else h11 and asyncio
(``GYMLAB_SERVER_STACK=asyncio`` forces those, to compare the two)."""

from __future__ import annotations

from importlib.util import find_spec
from typing import Any

from gymlab._sync import asyncio_forced


def uvicorn_options() -> dict[str, Any]:
    """``uvicorn.Config`` options of every gymlab server: ``http`` and ``loop`` named, no proxy headers."""
    fast = not asyncio_forced()
    return {
        "http": "httptools" if fast and find_spec("httptools") else "h11",
        "loop": "uvloop" if fast and find_spec("uvloop") else "asyncio",
        "proxy_headers": False,
    }


def settle_heap() -> None:
    """Move what a server process holds before it serves out of the collector's sight (not in a Lab)."""
    import gc

    gc.collect()
    gc.freeze()
