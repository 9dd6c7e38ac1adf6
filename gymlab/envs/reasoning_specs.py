"""The bounds a reasoning-gym spec from a request keeps before anything is built: a registered dataset, its
own fields of their types, ``size`` and ``seed`` in range, numbers at most ``max_config_scale`` times their
default (unless the server issued the spec), a composite's ``datasets`` a short list of such specs."""

from __future__ import annotations

import dataclasses
import json
import math
import types
import typing
from typing import Any

MAX_ITEMS = 1000  # items of a list or dict value
MAX_CHARS = 1000  # characters of a string value
MAX_COMPOSITE = 64  # datasets one composite spec mixes


class SpecError(ValueError):
    """A spec from a request that the server will not build: the message names the field first."""


def spec_key(name: str, config: dict[str, Any]) -> str:
    """The spec's identity (its JSON, keys sorted)."""
    return json.dumps([name, config], sort_keys=True, default=str)


def check_spec(ref: Any, server: Any, *, issued: bool) -> None:
    """``SpecError`` naming the first field of ``ref`` (dataset, config, index) out of bounds or of the wrong type."""
    check_config(ref.dataset, ref.config, "config", server, issued=issued)
    size = ref.config.get("size")
    if isinstance(size, int) and ref.index >= size:
        raise SpecError(f"index: {ref.index} is past {ref.dataset}'s size {size}")


def check_config(name: Any, config: Any, where: str, server: Any, *, issued: bool) -> None:
    from reasoning_gym.factory import DATASETS

    if not isinstance(name, str) or name not in DATASETS:
        known = ", ".join(sorted(DATASETS)[:12])
        raise SpecError(
            f"{where.rsplit('config', 1)[0]}dataset: no reasoning-gym dataset {name!r:.80} (e.g. {known}, ...)"
        )
    if not isinstance(config, dict):
        raise SpecError(f"{where}: a config is an object of {name}'s fields, got {type(config).__name__}")
    cls = DATASETS[name][1]
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    for key, value in config.items():
        path = f"{where}.{key}"
        if key not in fields:
            raise SpecError(f"{path}: {name} has no field {key!r:.80}; its fields: {', '.join(fields)}")
        if key == "size":
            if not _whole(value) or not 1 <= value <= server.max_size:
                raise SpecError(f"{path}: a whole number from 1 to {server.max_size} (max_size), got {value!r:.80}")
        elif key == "seed":
            if value is not None and (not _whole(value) or abs(value) >= 2**63):
                raise SpecError(f"{path}: a whole number (under 2**63) or null, got {value!r:.80}")
        elif key == "datasets" and name == "composite":
            _check_composite(value, path, server, issued=issued)
        elif value == _default(fields[key]):
            continue  # the dataset's own default, as JSON (a few defaults do not match their annotations)
        else:
            limit = None if issued else _limit(fields[key], server.max_config_scale)
            _check_value(value, hints.get(key, Any), path, limit)


def _check_composite(value: Any, path: str, server: Any, *, issued: bool) -> None:
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_COMPOSITE:
        raise SpecError(f"{path}: a list of 1 to {MAX_COMPOSITE} dataset specs, got {value!r:.80}")
    for i, spec in enumerate(value):
        here = f"{path}[{i}]"
        if (
            not isinstance(spec, dict)
            or not isinstance(spec.get("name"), str)
            or set(spec) - {"name", "weight", "config"}
        ):
            raise SpecError(f"{here}: an object with name, weight and config, got {spec!r:.80}")
        weight = spec.get("weight", 1)
        if not _number(weight) or not 0 < weight <= 1e6:
            raise SpecError(f"{here}.weight: a number above 0 (at most 1e6), got {weight!r:.80}")
        check_config(spec["name"], spec.get("config", {}), f"{here}.config", server, issued=issued)


def _limit(field: dataclasses.Field, scale: float) -> float | None:
    """The largest magnitude a numeric field may take: ``scale`` times its default's (at least 10)."""
    default = field.default
    numbers = (
        [default] if _number(default) else [v for v in default if _number(v)] if isinstance(default, tuple) else []
    )
    return scale * max([10.0, *(abs(v) for v in numbers)]) if numbers or default is None else None


def _default(field: dataclasses.Field) -> Any:
    """A field's default as JSON reads it back (``MISSING`` when it has none)."""
    if field.default is not dataclasses.MISSING:
        return json.loads(json.dumps(field.default, default=str))
    if field.default_factory is not dataclasses.MISSING:
        return json.loads(json.dumps(field.default_factory(), default=str))
    return dataclasses.MISSING


def _whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _number(value: Any) -> bool:
    """A finite number: any whole number (never converted to a float: it may be past one), a finite float."""
    return _whole(value) or isinstance(value, float) and math.isfinite(value)


def _check_value(value: Any, hint: Any, path: str, limit: float | None) -> None:
    """``SpecError`` unless ``value`` is of type ``hint`` (numbers within ``limit``, containers short)."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return
        errors = []
        for arg in (a for a in args if a is not type(None)):
            try:
                return _check_value(value, arg, path, limit)
            except SpecError as exc:
                errors.append(exc)
        raise errors[0] if errors else SpecError(f"{path}: null is not allowed here")
    if origin is typing.Literal:
        if value not in args:
            raise SpecError(f"{path}: one of {', '.join(map(repr, args))}, got {value!r:.80}")
        return
    if hint is bool:
        if not isinstance(value, bool):
            raise SpecError(f"{path}: true or false, got {value!r:.80}")
        return
    if hint in (int, float):
        ok = _whole(value) if hint is int else _number(value)
        if not ok:
            raise SpecError(f"{path}: a {'whole number' if hint is int else 'number'}, got {value!r:.80}")
        if limit is not None and abs(value) > limit:
            raise SpecError(
                f"{path}: at most {limit:g} in size (max_config_scale times its default), got {value!r:.80}"
            )
        return
    if hint is str:
        if not isinstance(value, str) or len(value) > MAX_CHARS:
            raise SpecError(f"{path}: a string of at most {MAX_CHARS} characters, got {value!r:.80}")
        return
    container = origin or hint
    if container in (list, tuple, set, frozenset) or container is typing.Sequence:
        if not isinstance(value, list) or len(value) > MAX_ITEMS:
            raise SpecError(f"{path}: a list of at most {MAX_ITEMS} items, got {value!r:.80}")
        fixed = container is tuple and len(args) > 1 and args[-1] is not Ellipsis
        if fixed and len(value) != len(args):
            raise SpecError(f"{path}: a list of {len(args)} items, got {value!r:.80}")
        for i, item in enumerate(value):
            _check_value(item, (args[i] if fixed else args[0]) if args else Any, f"{path}[{i}]", limit)
        return
    if container is dict:
        if not isinstance(value, dict) or len(value) > MAX_ITEMS:
            raise SpecError(f"{path}: an object of at most {MAX_ITEMS} keys, got {value!r:.80}")
        return
    if isinstance(value, (list, dict)) and len(value) > MAX_ITEMS:  # a type not named here: the build judges it
        raise SpecError(f"{path}: at most {MAX_ITEMS} items, got {len(value)}")
