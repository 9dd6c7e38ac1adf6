"""Load the example environments shipped in ``environments/`` (each a folder with ``app.py``)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

ENVIRONMENTS_DIR = Path(__file__).resolve().parent.parent / "environments"


def environment_dir(name: str) -> Path:
    path = ENVIRONMENTS_DIR / name
    if not (path / "app.py").exists():
        known = sorted(p.name for p in ENVIRONMENTS_DIR.iterdir() if (p / "app.py").exists())
        raise LookupError(f"no example environment {name!r}; known: {', '.join(known)}")
    return path


def load_environment(name: str) -> ModuleType:
    """The module of ``environments/<name>/app.py`` (its server class, policy and rows)."""
    modname = f"gymlab_env_{name}"
    if modname in sys.modules:
        return sys.modules[modname]
    path = environment_dir(name) / "app.py"
    spec = importlib.util.spec_from_file_location(modname, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[modname] = module
    spec.loader.exec_module(module)
    return module


def example_rows(name: str, dataset: str = "example") -> list[dict]:
    """The rows of ``environments/<name>/data/<dataset>.jsonl``."""
    path = environment_dir(name) / "data" / f"{dataset}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
