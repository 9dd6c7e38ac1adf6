"""Small helpers for server entrypoints: importing an entrypoint file, and knowing who imports it."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType


def import_file(path: str | Path, modname: str, *, sibling_imports: bool = False) -> ModuleType:
    """The module of the file ``path``, imported once as ``modname`` (never left half-imported);
    ``sibling_imports``: its folder on ``sys.path`` while it runs."""
    if modname in sys.modules:
        return sys.modules[modname]
    path = Path(path)
    spec = importlib.util.spec_from_file_location(modname, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} is not a Python file: cannot import it as {modname}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[modname] = module
    if sibling_imports:
        sys.path.insert(0, str(path.parent))
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[modname]
        raise
    finally:
        if sibling_imports:
            sys.path.remove(str(path.parent))
    return module


def is_gymlab_fastapi_entrypoint(file: str) -> bool:
    """True when a worker imports ``file`` to serve its module-level ``app`` (``elif ...: app = run_webserver()``)."""
    from gymlab._runtime.workers import worker_context

    ctx = worker_context()
    return ctx is not None and os.path.realpath(file) == ctx["entrypoint"]


#: The reference's name for the same check, so an entrypoint ported from it runs with only its import
#: line changed (``from gymlab.utils import is_nemo_gym_fastapi_entrypoint``).
is_nemo_gym_fastapi_entrypoint = is_gymlab_fastapi_entrypoint
