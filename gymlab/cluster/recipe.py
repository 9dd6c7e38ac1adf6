"""What a cell serves: one ``Recipe`` per server, and the code they name shipped to the nodes.

A recipe holds the server class and its config, with references to the other servers of the same
cell by name; the cell binds them to its own URLs. How a class (or a ``policy`` function) reaches a
node (``portable``):

- installed packages (gymlab, site-packages) and the standard library travel by name;
- a class from a file (a config's ``app.py``, an example environment, a test module) travels as a
  ``FileRef``: the node imports that file under the same module name, so its annotations, helper
  models and module state are whole (the file must be on the node: a shared filesystem, or Ray's
  ``runtime_env={"working_dir": ...}``);
- anything else (a notebook's ``__main__``, a class defined inside a function) is pickled by value
  by Ray's cloudpickle, "as it is".
"""

from __future__ import annotations

import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

#: Roles of a cell's servers, in the order a cell starts them (referenced servers first).
ROLES = ("model", "resources", "agent")

#: Config types of a YAML instance -> the role its server has in a cell.
ROLE_OF_TYPE = {
    "responses_api_models": "model",
    "resources_servers": "resources",
    "responses_api_agents": "agent",
    "environment_servers": "agent",  # answers /run itself
}


@dataclass
class Recipe:
    """One server of a cell: ``server(**config)`` with ``refs`` (field -> server name) as URLs."""

    name: str
    role: str
    server: type
    config: dict[str, Any] = field(default_factory=dict)
    refs: dict[str, str] = field(default_factory=dict)

    def build(self, urls: dict[str, str]):
        """The server instance on this node, its references bound to ``urls``, on 127.0.0.1."""
        config = {k: resolve(v) for k, v in self.config.items()}
        config.update({key: urls[name] for key, name in self.refs.items()})
        return resolve(self.server)(**{**config, "name": self.name, "host": "127.0.0.1", "port": 0})


@dataclass(frozen=True)
class FileRef:
    """A class or function by the file that defines it: imported on the node under the same name."""

    path: str
    module: str
    qualname: str

    def load(self) -> Any:
        from gymlab.utils import import_file

        obj: Any = import_file(self.path, self.module, sibling_imports=True)
        for part in self.qualname.split("."):
            obj = getattr(obj, part)
        return obj


def resolve(value: Any) -> Any:
    """``value``, or what a ``FileRef`` names."""
    return value.load() if isinstance(value, FileRef) else value


def ordered(recipes: list[Recipe]) -> list[Recipe]:
    """Every recipe after the ones it refers to (a cell starts them in this order)."""
    by_name = {r.name: r for r in recipes}
    out: list[Recipe] = []
    seen: set[str] = set()

    def visit(recipe: Recipe) -> None:
        if recipe.name in seen:
            return
        seen.add(recipe.name)
        for name in recipe.refs.values():
            if name in by_name:
                visit(by_name[name])
        out.append(recipe)

    for recipe in sorted(recipes, key=lambda r: ROLES.index(r.role) if r.role in ROLES else len(ROLES)):
        visit(recipe)
    return out


def _installed(path: str | None) -> bool:
    """True for a file every node has by name: the standard library, site-packages, gymlab itself."""
    if not path:
        return True  # a built-in module
    here = Path(path).resolve()
    gymlab_root = Path(__file__).resolve().parents[1]
    roots = {sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    if here.is_relative_to(gymlab_root):
        return True
    return any(here.is_relative_to(Path(root).resolve()) for root in roots) or "site-packages" in here.parts


def portable(obj: Any) -> Any:
    """``obj`` as it travels to a node: itself (by name, or by value) or a ``FileRef`` (see the module doc)."""
    name = getattr(obj, "__module__", None)
    module = sys.modules.get(name or "")
    path = getattr(module, "__file__", None)
    if module is None or name == "__main__" or _installed(path):
        return obj  # by name, or (``__main__``) by value already
    if path and "<locals>" not in getattr(obj, "__qualname__", "<locals>") and Path(path).is_file():
        return FileRef(str(Path(path).resolve()), name, obj.__qualname__)
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(module)
    return obj


def portable_recipes(recipes: list[Recipe]) -> list[Recipe]:
    """The recipes with every class and callable they name made ``portable``."""
    return [
        Recipe(
            r.name,
            r.role,
            portable(r.server),
            {k: portable(v) if callable(v) and not isinstance(v, type) else v for k, v in r.config.items()},
            dict(r.refs),
        )
        for r in recipes
    ]


def from_config(config) -> list[Recipe]:
    """The recipes of every server of a loaded YAML config (``gymlab.collection.config.Config``):
    classes and ``policy: app.py:fn`` imported here, on the driver (``portable`` says how they reach a node)."""
    from gymlab.collection.imports import load_object

    recipes = []
    for spec in config.launch_order():
        fields = {k: v for k, v in spec.fields.items() if k not in ("host", "port", "num_replicas")}
        if isinstance(fields.get("policy"), str) and ":" in fields["policy"]:
            fields["policy"] = load_object(fields["policy"], where=f"{spec.where}.policy")
        refs = {key: name for key, (_type, name) in spec.refs.items()}
        recipes.append(Recipe(spec.instance, ROLE_OF_TYPE[spec.server_type], spec.server_cls(), fields, refs))
    return recipes
