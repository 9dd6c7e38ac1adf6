"""Importing what a config names (``module:attr``, ``app.py:attr``); a failure names where it came from."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path
from typing import Any

from gymlab.errors import ConfigError
from gymlab.registry import defined_server_classes
from gymlab.utils import import_file


def load_object(target: str, *, where: str = "") -> Any:
    """``module:attr`` or ``/path/to/file.py:attr`` (without ``:attr``, the module itself)."""
    prefix = f"{where}: " if where else ""
    module_part, _, attr = target.rpartition(":") if ":" in target else (target, "", "")
    if module_part.endswith(".py") or "/" in module_part:
        path = Path(module_part)
        if not path.is_file() or path.suffix != ".py":
            what = "is not a Python file (.py)" if path.exists() else "does not exist"
            raise ConfigError(f"{prefix}entrypoint {path} {what} (paths are relative to the config file)")
        modname = "gymlab_entry_" + "".join(c if c.isalnum() else "_" for c in str(path.resolve()))
        try:
            module = import_file(path, modname, sibling_imports=True)
        except (SyntaxError, ImportError) as exc:  # not Python, or a module it needs is missing
            raise ConfigError(f"{prefix}entrypoint {path} cannot be imported: {type(exc).__name__}: {exc}") from None
    else:
        try:
            module = importlib.import_module(module_part)
        except ModuleNotFoundError as exc:
            if exc.name and module_part.startswith(exc.name):
                raise ConfigError(
                    f"{prefix}module {module_part!r} is not available in this installation "
                    f"({exc}); check the implementation name or give an entrypoint"
                ) from None
            raise
    if not attr:
        return module
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ConfigError(f"{prefix}{module_part} has no {attr!r}") from None


def load_server_class(target: str, *, where: str = "") -> type:
    """The server class of an import target: the named one, or the one the module itself defines."""
    from gymlab.server import BaseServer

    obj = load_object(target, where=where)
    prefix = f"{where}: " if where else ""
    if inspect.ismodule(obj):
        found = defined_server_classes(obj)
        if len(found) != 1:
            names = ", ".join(c.__name__ for c in found) or "none"
            raise ConfigError(
                f"{prefix}{target} defines {len(found)} server classes ({names}); "
                "name one with 'server_class: <ClassName>'"
            )
        obj = found[0]
    if not (inspect.isclass(obj) and issubclass(obj, BaseServer)):
        raise ConfigError(f"{prefix}{target} is not a gymlab server class")
    return obj


def build_server(target: str, cfg: dict[str, Any], *, where: str = ""):
    """A server instance of ``target`` with config ``cfg``; a ``policy`` import string is imported here."""
    from pydantic import ValidationError

    cls = load_server_class(target, where=where)
    cfg = dict(cfg)
    if isinstance(cfg.get("policy"), str) and ":" in cfg["policy"]:
        cfg["policy"] = load_object(cfg["policy"], where=f"{where}.policy")
    try:
        return cls(**cfg)
    except ValidationError as exc:
        from gymlab.protocol.validation import describe_validation

        raise ConfigError(f"{where or cls.__name__}.{describe_validation(exc)}") from None
