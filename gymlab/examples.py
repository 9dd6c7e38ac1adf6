"""Load the example environments (folders with ``app.py``, ``data/``, ``configs/``) from a checkout or an install."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType

_PACKAGE = Path(__file__).resolve().parent
ENVIRONMENTS_DIR = (
    _PACKAGE / "environments" if (_PACKAGE / "environments").is_dir() else _PACKAGE.parent / "environments"
)


def environment_dir(name: str) -> Path:
    """The folder of example ``name``: ``app.py``, ``data/*.jsonl``, ``configs/*.yaml``."""
    path = ENVIRONMENTS_DIR / name
    if not (path / "app.py").exists():
        known = sorted(p.name for p in ENVIRONMENTS_DIR.iterdir() if (p / "app.py").exists())
        raise LookupError(f"no example environment {name!r}; known: {', '.join(known)}")
    return path


def load_environment(name: str) -> ModuleType:
    """The module of the example's ``app.py`` (its server class, policy and rows)."""
    from gymlab.utils import import_file

    return import_file(environment_dir(name) / "app.py", f"gymlab_env_{name}")


def example_rows(name: str, dataset: str = "example") -> list[dict]:
    """The rows of the example's ``data/<dataset>.jsonl``."""
    path = environment_dir(name) / "data" / f"{dataset}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
