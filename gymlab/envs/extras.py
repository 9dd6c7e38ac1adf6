"""The adapters' libraries: imported only when an adapter is used, with an error naming the extra."""

from __future__ import annotations

import importlib
from types import ModuleType

#: adapter -> (the module it imports, the gymlab extra that installs it)
LIBRARIES = {
    "reasoning_gym": ("reasoning_gym", "reasoning-gym"),
    "textarena": ("textarena", "textarena"),
    "gymnasium": ("gymnasium", "gymnasium"),
    "openenv": ("openenv.core", "openenv"),
    "verifiers": ("verifiers.v1", "verifiers"),
}


def need(adapter: str) -> ModuleType:
    """The library behind ``adapter``; an ``ImportError`` saying which extra installs it."""
    module, extra = LIBRARIES[adapter]
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"gymlab.envs.{adapter} needs the {module!r} package, which is not installed here ({exc}); "
            f"install it with `pip install 'gymlab[{extra}]'`"
        ) from exc


def installed(adapter: str) -> bool:
    """Whether ``adapter``'s library imports here."""
    try:
        need(adapter)
    except ImportError:
        return False
    return True
