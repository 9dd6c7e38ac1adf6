"""What a cell serves: one ``Recipe`` per server, and the code they name shipped to the nodes
(``pack``: cloudpickle; ``unpack``: the files their code comes from imported first, docs/cluster.md).
"""

from __future__ import annotations

import sys
import sysconfig
from dataclasses import dataclass, field
from graphlib import TopologicalSorter
from pathlib import Path
from typing import Any

from gymlab.errors import ConfigError
from gymlab.utils import import_file

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
    #: For a server from a config: its import target and YAML fields (JSON), so a cell can run it as
    #: processes when it has ``num_workers`` > 1 (as ``gymlab serve`` does); ``where`` names it.
    target: str | None = None
    raw: dict[str, Any] | None = None
    where: str = ""

    @property
    def workers(self) -> int:
        return int(self.config.get("num_workers", 1) or 1)

    def build(self, urls: dict[str, str]):
        """The server instance on this node, its references bound to ``urls``, on 127.0.0.1."""
        config = {**self.config, **{key: urls[name] for key, name in self.refs.items()}}
        return self.server(**{**config, "name": self.name, "host": "127.0.0.1", "port": 0})


def ordered(recipes: list[Recipe]) -> list[Recipe]:
    """Every recipe after the ones it refers to (a cell starts them in this order), models first."""
    by_name = {r.name: r for r in sorted(recipes, key=lambda r: ROLES.index(r.role) if r.role in ROLES else 3)}
    graph = {name: [n for n in r.refs.values() if n in by_name] for name, r in by_name.items()}
    return [by_name[name] for name in TopologicalSorter(graph).static_order()]


def _installed(path: str | None) -> bool:
    """True for a file every node has by name: the standard library, site-packages, gymlab itself."""
    if not path:
        return True  # a built-in module
    here = Path(path).resolve()
    roots = [sysconfig.get_paths()[k] for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    roots.append(str(Path(__file__).resolve().parents[1]))  # gymlab itself
    return any(here.is_relative_to(Path(root).resolve()) for root in roots) or "site-packages" in here.parts


def _files_of(obj: Any) -> set[tuple[str, str]]:
    """(path, module name) of the files a node must import for ``obj`` to unpickle: its module's,
    and its base classes' (nothing for installed modules and ``__main__``)."""
    found = set()
    for item in obj.__mro__ if isinstance(obj, type) else (obj,):
        name: str = getattr(item, "__module__", None) or ""
        module = sys.modules.get(name)
        path: str = getattr(module, "__file__", None) or ""
        if module is None or name == "__main__" or _installed(path) or not Path(path).is_file():
            continue
        found.add((str(Path(path).resolve()), name))
    return found


def pack(recipes: list[Recipe], working_dir: str | None = None) -> tuple[list[tuple[str, str, str | None]], bytes]:
    """The recipes as they travel: the files to import first (path, module name, and the path
    relative to Ray's ``working_dir`` when the file is under it), and the pickled recipes."""
    from ray import cloudpickle

    files: set[tuple[str, str]] = set()
    for recipe in recipes:
        files |= _files_of(recipe.server)
        for value in recipe.config.values():
            if callable(value):
                files |= _files_of(value)
    root = Path(working_dir).resolve() if working_dir else None
    relative = lambda p: str(Path(p).relative_to(root)) if root and Path(p).is_relative_to(root) else None  # noqa: E731
    return [(path, name, relative(path)) for path, name in sorted(files)], cloudpickle.dumps(recipes)


def unpack(files: list[tuple[str, str, str | None]], blob: bytes) -> list[Recipe]:
    """On the node: import ``files`` under their module names, then unpickle the recipes. A file
    not at its driver's path is looked for in the working directory (Ray's ``working_dir`` copy)."""
    from ray import cloudpickle

    for path, name, relative in files:
        if not Path(path).is_file() and relative and Path(relative).is_file():
            path = str(Path(relative).resolve())
        if not Path(path).is_file():
            raise ConfigError(
                f"{path}: not on this node; put it there (a shared filesystem) or under the runtime_env "
                "working_dir given when Ray is first connected"
            )
        import_file(path, name, sibling_imports=True)
    return cloudpickle.loads(blob)


def from_config(config) -> list[Recipe]:
    """The recipes of every server of a loaded YAML config (``gymlab.collection.config.Config``):
    classes and ``policy: app.py:fn`` imported here, on the driver (``pack`` says how they reach a node)."""
    from gymlab.collection.imports import load_object

    recipes = []
    for spec in config.launch_order():
        raw = {k: v for k, v in spec.fields.items() if k not in ("host", "port")}  # a cell binds 127.0.0.1
        fields = dict(raw)
        if isinstance(fields.get("policy"), str) and ":" in fields["policy"]:
            fields["policy"] = load_object(fields["policy"], where=f"{spec.where}.policy")
        refs = {key: name for key, (_type, name) in spec.refs.items()}
        role = ROLE_OF_TYPE[spec.server_type]
        recipes.append(Recipe(spec.instance, role, spec.server_cls(), fields, refs, spec.target(), raw, spec.where))
    return recipes


def env_recipes(
    env: type,
    agent: str | type,
    model: Any,
    name: str | None,
    agent_config: dict[str, Any] | None,
    config: dict[str, Any],
) -> tuple[list[Recipe], str]:
    """The recipes of ``lab.serve_pool``'s cell, and the agent's name: ``env`` built with ``config``, the
    agent bound to it, and ``model`` (a policy function, ``dict(openai=...)`` options, or a model URL)."""
    from gymlab.registry import agent_class

    if not isinstance(env, type):
        raise TypeError(f"serve_pool takes a server class (each cell builds its own), not {type(env).__name__}")
    env_name = config.pop("name", None) or env.model_fields["name"].default or env.__name__.lower()
    recipes = [Recipe(env_name, "resources", env, config)]
    agent_cls = agent_class(agent) if isinstance(agent, str) else agent
    agent_name = name or (agent if isinstance(agent, str) else agent_cls.__name__.lower())
    agent_recipe = Recipe(agent_name, "agent", agent_cls, dict(agent_config or {}), {"resources_server": env_name})
    if isinstance(model, str):
        agent_recipe.config["model_server"] = model
    elif isinstance(model, dict):
        from gymlab.models.openai import OpenAIModel

        recipes.append(Recipe("openai_model", "model", OpenAIModel, dict(model.get("openai", model))))
        agent_recipe.refs["model_server"] = "openai_model"
    elif callable(model):
        from gymlab.models.policy import PolicyModel

        recipes.append(Recipe("policy_model", "model", PolicyModel, {"policy": model}))
        agent_recipe.refs["model_server"] = "policy_model"
    elif model is not None:
        raise TypeError(
            f"serve_pool model=: a policy function, openai options or a model server URL, not {type(model).__name__}"
        )
    return [*recipes, agent_recipe], agent_name
