"""Whether a JupyterLab started by a test answers yet (shared by the browser and `make lab` tests)."""

from __future__ import annotations

import httpx


def answers(base: str, token: str) -> bool:
    """True once ``base`` answers ``/api/status`` with the token."""
    try:
        return httpx.get(f"{base}/api/status", params={"token": token}, timeout=2).status_code == 200
    except httpx.HTTPError:
        return False
