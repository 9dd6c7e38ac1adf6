"""YAML configs: instance -> server type -> implementation, merged, checked; errors name file and key."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gymlab.collection.imports import build_server, load_server_class
from gymlab.errors import ConfigError
from gymlab.registry import BUILTINS

SERVER_TYPES = ("resources_servers", "responses_api_agents", "responses_api_models", "environment_servers")

#: Top-level keys that are not server instances.
TOP_LEVEL_KEYS = frozenset({"environment_server_routes", "environment_routing_mode"})

#: Keys of an implementation block that are for gymlab itself, not fields of the server class
#: (``num_replicas``: how many Ray cells ``--ray`` starts, beside the server's own ``num_workers``).
LAUNCH_KEYS = frozenset({"entrypoint", "server_class", "domain", "datasets", "description", "num_replicas"})

#: Keys holding a path (resolved relative to the YAML file that sets them).
_PATH_KEYS = ("entrypoint", "jsonl_fpath", "prepare_script")


@dataclass(frozen=True)
class DatasetSpec:
    """One ``datasets:`` entry: a JSONL file of rows for the server that declares it."""

    name: str
    type: str
    jsonl_fpath: Path
    owner: str
    taskset: str | None = None
    source: Path | None = None


@dataclass
class ServerSpec:
    """One server instance of a config: what to build, with which fields, bound to which servers."""

    instance: str
    server_type: str
    implementation: str
    fields: dict[str, Any]
    refs: dict[str, tuple[str, str]]
    source: Path
    entrypoint: str | None = None
    server_class: str | None = None
    domain: str | None = None
    datasets: list[DatasetSpec] = field(default_factory=list)
    num_replicas: int | None = None

    @property
    def where(self) -> str:
        return f"{self.source}: {self.instance}.{self.server_type}.{self.implementation}"

    @property
    def host(self) -> str:
        return str(self.fields.get("host", "127.0.0.1"))

    @property
    def port(self) -> int:
        return int(self.fields.get("port", 0) or 0)

    def target(self) -> str:
        """The import target: ``path/to/app.py[:Class]``, ``module:Class`` or ``module``."""
        builtin = BUILTINS.get(self.server_type, {}).get(self.implementation)
        if self.entrypoint is not None and (Path(self.entrypoint).exists() or builtin is None):
            return self.entrypoint + (f":{self.server_class}" if self.server_class else "")
        if builtin is not None:
            return builtin
        if self.server_class and ":" in self.server_class:
            return self.server_class
        raise ConfigError(
            f"{self.where}: no entrypoint, and {self.implementation!r} is not a built-in {self.server_type} "
            f"implementation (built-ins: {', '.join(sorted(BUILTINS[self.server_type])) or 'none'}); "
            "add 'entrypoint: app.py' (relative to the config file)"
        )

    def server_cls(self) -> type:
        return load_server_class(self.target(), where=self.where)

    def check_fields(self) -> None:
        """Refuse keys the server class does not declare (imports the class)."""
        cls = self.server_cls()
        if unknown := [k for k in self.fields if k not in cls.model_fields]:
            known = ", ".join(sorted(cls.model_fields))
            raise ConfigError(f"{self.where}.{unknown[0]}: unknown key for {cls.__name__}; its fields are: {known}")

    def launch_config(self, urls: dict[str, str], **overrides: Any) -> dict[str, Any]:
        """The server's config as one process gets it: its fields, with refs as URLs."""
        cfg = {"name": self.instance, **self.fields}
        for key, (_type, name) in self.refs.items():
            if name not in urls:
                raise ConfigError(f"{self.where}.{key}: {name!r} has no URL yet (start it first)")
            cfg[key] = urls[name]
        cfg.update(overrides)
        return cfg

    def build(self, urls: dict[str, str], **overrides: Any):
        """A server instance, refs bound to ``urls``."""
        return build_server(self.target(), self.launch_config(urls, **overrides), where=self.where)


@dataclass
class Config:
    """A merged, checked config: server specs by instance name, plus the taskset routes."""

    servers: dict[str, ServerSpec]
    environment_server_routes: dict[str, str] = field(default_factory=dict)
    files: list[Path] = field(default_factory=list)

    def of_type(self, server_type: str) -> dict[str, ServerSpec]:
        return {n: s for n, s in self.servers.items() if s.server_type == server_type}

    @property
    def agents(self) -> dict[str, ServerSpec]:
        return self.of_type("responses_api_agents")

    @property
    def environments(self) -> dict[str, ServerSpec]:
        """Resources servers and environment servers."""
        return {**self.of_type("resources_servers"), **self.of_type("environment_servers")}

    @property
    def models(self) -> dict[str, ServerSpec]:
        return self.of_type("responses_api_models")

    @property
    def datasets(self) -> list[DatasetSpec]:
        return [d for s in self.servers.values() for d in s.datasets]

    def launch_order(self) -> list[ServerSpec]:
        """Every server after the servers it refers to (models and resources before agents)."""
        rank = ("responses_api_models", "resources_servers", "responses_api_agents", "environment_servers").index
        ordered: dict[str, ServerSpec] = {}

        def visit(name: str, chain: tuple[str, ...]) -> None:
            spec = self.servers[name]
            if name in chain:
                raise ConfigError(f"{spec.where}: server references form a cycle: {' -> '.join((*chain, name))}")
            if name not in ordered:
                for _t, ref in spec.refs.values():
                    visit(ref, (*chain, name))
                ordered[name] = spec

        for name in sorted(self.servers, key=lambda n: rank(self.servers[n].server_type)):  # then config order
            visit(name, ())
        return list(ordered.values())


def deep_merge(base: dict[str, Any], update: dict[str, Any]) -> dict[str, Any]:
    """``update`` merged into a copy of ``base``: dicts merge key by key, anything else is replaced."""
    out = dict(base)
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


#: Levels of nesting a config may have: far more than any config needs, far fewer than Python's stack.
MAX_DEPTH = 100


def _loader(path: Path):
    """A safe YAML loader that refuses a key twice in one mapping and nesting past ``MAX_DEPTH``."""
    import yaml

    class Loader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent, index):
            self.depth += 1
            if self.depth > MAX_DEPTH:
                line = self.peek_event().start_mark.line + 1
                raise ConfigError(
                    f"{path}:{line}: nested deeper than {MAX_DEPTH} levels; a config is a few levels deep"
                )
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

        def construct_mapping(self, node, deep=False):
            seen: dict[Any, int] = {}
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                if key_node.tag != "tag:yaml.org,2002:merge" and isinstance(key, str | int | float | None):
                    line = key_node.start_mark.line + 1
                    if key in seen:
                        raise ConfigError(
                            f"{path}:{line}: key {key!r} appears twice in one mapping (first on line {seen[key]}); "
                            "YAML would keep only the last: remove one"
                        )
                    seen[key] = line
            return super().construct_mapping(node, deep)

    return Loader


def _read_yaml(path: Path) -> dict[str, Any]:
    import yaml

    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read the config file: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError(f"{path}:{line}: not UTF-8 text (byte {exc.start}); save the config as UTF-8") from None
    try:
        data = yaml.load(text, Loader=_loader(path))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise ConfigError(f"{where}: not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: a config is a mapping of instance names, not a {type(data).__name__}")
    return data


def _absolutize(block: dict[str, Any], base: Path) -> dict[str, Any]:
    """A copy of an implementation block (and its datasets) with its path keys made absolute against ``base``."""
    block = dict(block)
    for key in _PATH_KEYS:  # a file path, not ``pkg.module:attr``
        value = block.get(key)
        if isinstance(value, str) and not (":" in value and "/" not in value and ".py" not in value):
            block[key] = str((base / value).resolve())
    if isinstance(policy := block.get("policy"), str):
        module, _, attr = policy.rpartition(":")
        if module.endswith(".py") or "/" in module:
            block["policy"] = f"{(base / module).resolve()}:{attr}"
    if isinstance(block.get("datasets"), list):
        block["datasets"] = [_absolutize(d, base) if isinstance(d, dict) else d for d in block["datasets"]]
    return block


def load_config(*paths: str | Path) -> Config:
    """YAML files deep-merged in order (later files win) and checked; relative paths are the setting file's."""
    if not paths:
        raise ConfigError("no config file given")
    merged: dict[str, Any] = {}
    sources: dict[str, Path] = {}
    files = [Path(p).resolve() for p in paths]
    for path in files:
        data = _read_yaml(path)
        for inst, body in data.items():
            sources[inst] = path
            if isinstance(body, dict) and inst not in TOP_LEVEL_KEYS:
                for impls in body.values():
                    if isinstance(impls, dict):
                        impls.update({i: _absolutize(b, path.parent) for i, b in impls.items() if isinstance(b, dict)})
        merged = deep_merge(merged, data)
    routes = merged.get("environment_server_routes", {})
    if not isinstance(routes, dict) or not all(isinstance(v, str) for v in routes.values()):
        raise ConfigError(
            f"{sources['environment_server_routes']}: environment_server_routes: expected a mapping of taskset -> "
            "environment server instance name"
        )
    servers = {  # a top-level key whose value is not a mapping is a setting no server reads
        inst: _parse_instance(inst, body, sources[inst])
        for inst, body in merged.items()
        if isinstance(body, dict) and inst not in TOP_LEVEL_KEYS
    }
    config = Config(servers=servers, environment_server_routes=dict(routes), files=files)
    _check_refs(config, sources.get("environment_server_routes"))
    return config


def _parse_instance(inst: str, body: dict[str, Any], src: Path) -> ServerSpec:
    if unknown := [k for k in body if k not in SERVER_TYPES]:
        raise ConfigError(
            f"{src}: {inst}.{unknown[0]}: unknown server type {unknown[0]!r}; expected one of {', '.join(SERVER_TYPES)}"
        )
    if len(body) != 1:
        raise ConfigError(f"{src}: {inst}: an instance has exactly one server type, found {', '.join(body) or 'none'}")
    ((stype, impls),) = body.items()
    if not isinstance(impls, dict) or len(impls) != 1:
        raise ConfigError(
            f"{src}: {inst}.{stype}: expected exactly one implementation name "
            f"(such as simple_agent), found {list(impls) if isinstance(impls, dict) else impls!r}"
        )
    ((impl, block),) = impls.items()
    if block is not None and not isinstance(block, dict):
        raise ConfigError(f"{src}: {inst}.{stype}.{impl}: expected a mapping of fields, got {block!r}")
    block = block or {}
    spec = ServerSpec(inst, stype, impl, {}, {}, src, *(block.get(k) for k in ("entrypoint", "server_class", "domain")))
    for key, value in block.items():
        if key in LAUNCH_KEYS:
            continue
        if not (isinstance(value, dict) and set(value) == {"type", "name"}):
            spec.fields[key] = value
        elif value["type"] in SERVER_TYPES:
            spec.refs[key] = (value["type"], str(value["name"]))
        else:
            raise ConfigError(
                f"{spec.where}.{key}.type: unknown server type {value['type']!r}; expected one of {', '.join(SERVER_TYPES)}"
            )
    spec.datasets = _parse_datasets(block.get("datasets"), spec)
    replicas = spec.num_replicas = block.get("num_replicas")
    if replicas is not None and (isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1):
        raise ConfigError(f"{spec.where}.num_replicas: a positive whole number of Ray cells, got {replicas!r}")
    return spec


def _parse_datasets(raw: Any, spec: ServerSpec) -> list[DatasetSpec]:
    if raw is not None and not isinstance(raw, list):
        raise ConfigError(f"{spec.where}.datasets: expected a list of datasets")
    out = []
    for i, d in enumerate(raw or []):
        key = f"{spec.where}.datasets[{i}]"
        if not isinstance(d, dict):
            raise ConfigError(f"{key}: expected a mapping with name, type and jsonl_fpath")
        if missing := next((need for need in ("name", "jsonl_fpath") if not d.get(need)), None):
            raise ConfigError(f"{key}.{missing}: missing")
        taskset = d.get("taskset")
        if taskset is not None and (not isinstance(taskset, str) or "/" in taskset or not taskset):
            raise ConfigError(f"{key}.taskset: a taskset name is a non-empty string without '/', got {taskset!r}")
        name, kind, path = str(d["name"]), str(d.get("type", "example")), Path(d["jsonl_fpath"])
        out.append(DatasetSpec(name, kind, path, spec.instance, taskset, spec.source))
    return out


def _defined(config: Config, server_type: str) -> str:
    return ", ".join(sorted(config.of_type(server_type))) or "none"


def _check_refs(config: Config, route_src: Path | None) -> None:
    for spec in config.servers.values():
        for key, (stype, name) in spec.refs.items():
            target = config.servers.get(name)
            if target is None or target.server_type != stype:
                extra = f" ({name!r} is a {target.server_type} instance)" if target is not None else ""
                raise ConfigError(
                    f"{spec.where}.{key}.name: refers to {stype} {name!r}, which this config does not "
                    f"define{extra}; defined {stype}: {_defined(config, stype)}"
                )
    routes = config.environment_server_routes
    for taskset, env in routes.items():
        if env not in config.of_type("environment_servers"):
            raise ConfigError(
                f"{route_src}: environment_server_routes.{taskset}: {env!r} is not an environment_servers "
                f"instance of this config; defined: {_defined(config, 'environment_servers')}"
            )
    for ds in (d for d in config.datasets if d.taskset is not None):
        where = f"{ds.source}: {ds.owner} dataset {ds.name!r}.taskset: {ds.taskset!r}"
        if ds.taskset not in routes:
            raise ConfigError(
                f"{where} is not mapped in environment_server_routes; add 'environment_server_routes: "
                f"{{{ds.taskset}: <environment server>}}'"
            )
        server = config.servers[routes[ds.taskset]]
        bound = {name for _t, name in server.refs.values()}
        if ds.owner != server.instance and ds.owner not in bound:
            raise ConfigError(
                f"{where} routes to {server.instance}, which does not bind {ds.owner} (it binds "
                f"{', '.join(sorted(bound)) or 'nothing'}); declare the dataset on a server the environment server "
                "refers to"
            )
