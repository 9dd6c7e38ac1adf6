"""Imports point down the layers, no two modules or packages import each other, and no module is long.

Every module under ``gymlab/`` is parsed with ``ast``; every import statement is an edge: imports
inside functions (a lazy import still ties the two modules together) and imports under
``if TYPE_CHECKING:`` (an annotation that names a type ties the two as surely as a call does). The
layer table is read from docs/architecture.md ("Layers, lowest first"), so the document and this
test cannot drift apart.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gymlab"
ARCHITECTURE = ROOT / "docs" / "architecture.md"
MAX_LINES = 500


def read_layers(text: str) -> list[tuple[str, list[str]]]:
    """The layer table of docs/architecture.md, lowest first: (layer, module prefixes).

    The table is the first Markdown table whose header starts ``| layer | modules |``; the modules
    column names modules in backticks, relative to ``gymlab`` (``lab.*`` is the package and all
    below it, ``gymlab`` the package's own ``__init__``).
    """
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if re.match(r"\|\s*layer\s*\|\s*modules\s*\|", line)), None)
    assert start is not None, f"{ARCHITECTURE.name}: no '| layer | modules |' table"
    layers = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        names = re.findall(r"`([^`]+)`", cells[1])
        assert names, f"{ARCHITECTURE.name}: layer {cells[0]!r} names no module"
        prefixes = []
        for name in names:
            name = name.removesuffix(".*")
            prefixes.append(name if name == "gymlab" or name.startswith("gymlab.") else f"gymlab.{name}")
        layers.append((cells[0], prefixes))
    return layers


LAYERS = read_layers(ARCHITECTURE.read_text())


def module_names(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module under ``package``, by dotted name (a package is its ``__init__``)."""
    names = {}
    for path in sorted(package.rglob("*.py")):
        if "environments" in path.relative_to(package).parts:
            continue  # the example environments: linked in, not part of the package's layers
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def layer_of(module: str, layers: list[tuple[str, list[str]]] = LAYERS) -> int:
    """The index of the layer holding ``module``: the longest prefix in the table that covers it."""
    best, length = None, -1
    for index, (_, prefixes) in enumerate(layers):
        for prefix in prefixes:
            covers = module == prefix or (prefix != "gymlab" and module.startswith(prefix + "."))
            if covers and len(prefix) > length:
                best, length = index, len(prefix)
    if best is None:
        raise AssertionError(f"{module} is in no layer: add it to the layer table in docs/architecture.md")
    return best


def package_of(module: str) -> str:
    """The unit of the package-cycle check: ``gymlab.lab.runs`` -> ``gymlab.lab``; a top-level module is its own."""
    return ".".join(module.split(".")[:2])


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The gymlab modules ``module`` imports, wherever the import statement is (``TYPE_CHECKING`` too)."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names if f"{target}.{alias.name}" in known)
    return {name for name in found if name in known and name != module}


def import_graph(package: Path = PACKAGE) -> dict[str, set[str]]:
    modules = module_names(package)
    known = set(modules)
    return {name: imports_of(name, path, known) for name, path in modules.items()}


def package_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The module graph folded onto packages: ``a -> b`` when a module of ``a`` imports one of ``b``."""
    folded: dict[str, set[str]] = {package_of(m): set() for m in graph}
    for a, targets in graph.items():
        folded[package_of(a)].update(package_of(b) for b in targets if package_of(b) != package_of(a))
    return folded


def upward_edges(graph: dict[str, set[str]], layers: list[tuple[str, list[str]]] = LAYERS) -> list[str]:
    return sorted(
        f"{a} -> {b} ({layers[layer_of(a, layers)][0]} imports {layers[layer_of(b, layers)][0]})"
        for a, targets in graph.items()
        for b in targets
        if layer_of(b, layers) > layer_of(a, layers)
    )


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(_a_cycle(graph, set(component)))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def _a_cycle(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A path ``a -> ... -> a`` inside one strongly connected component."""
    start = min(component)
    parents = {start: None}
    queue = [start]
    while queue:
        v = queue.pop(0)
        for w in sorted(graph[v] & component):
            if w == start:
                path = [v]
                while parents[path[-1]] is not None:
                    path.append(parents[path[-1]])
                return [*reversed(path), start]
            if w not in parents:
                parents[w] = v
                queue.append(w)
    raise AssertionError(component)


def _shown(found: list[list[str]]) -> str:
    return "\n".join(" -> ".join(c) for c in found)


# -- the package ----------------------------------------------------------------------------------


def test_every_module_has_a_layer():
    for module in module_names():
        layer_of(module)


def test_every_table_entry_names_a_module():
    modules = set(module_names())
    stale = [
        prefix
        for _, prefixes in LAYERS
        for prefix in prefixes
        if not any(m == prefix or m.startswith(prefix + ".") for m in modules)
    ]
    assert not stale, f"docs/architecture.md's layer table names modules that do not exist: {stale}"


def test_the_top_layers_are_ordered():
    """The notebook and CLI side is layered too: a cluster cell serves without a Lab, a Lab knows no
    probe and no trainer (they run through one), and only the CLI sees everything."""
    assert layer_of("gymlab.cluster") < layer_of("gymlab.lab") < layer_of("gymlab.cli")
    graph = import_graph()
    known = [(a, b) for a, targets in graph.items() if a.startswith("gymlab.lab") for b in targets]
    assert not [(a, b) for a, b in known if b.startswith(("gymlab.probes", "gymlab.train"))]


def test_no_import_points_up():
    upward = upward_edges(import_graph())
    assert not upward, "imports that point up the layers:\n" + "\n".join(upward)


def test_no_module_cycles():
    found = cycles(import_graph())
    assert not found, "modules that import each other:\n" + _shown(found)


def test_no_package_cycles():
    found = cycles(package_graph(import_graph()))
    assert not found, "packages that import each other:\n" + _shown(found)


def test_no_module_is_over_500_lines():
    long = {m: n for m, p in module_names().items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines (split them): {long}"


def test_the_readme_names_the_layers_of_the_table_in_order():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## How it is built\n", 1)[1].split("\n## ", 1)[0]
    chain = " ".join(p for p in section.split("\n\n") if "→" in p).replace("\n", " ")
    named = [re.sub(r"\s*\(.*", "", step).strip() for step in chain.split("→")]
    assert named == [name for name, _ in LAYERS], "README's 'How it is built' and docs/architecture.md's table differ"


# -- the checker finds what it should -------------------------------------------------------------


def test_lab_importing_cli_is_an_upward_edge_and_a_package_cycle():
    graph = import_graph()
    assert not cycles(package_graph(graph))
    graph["gymlab.lab.lab"] = graph["gymlab.lab.lab"] | {"gymlab.cli.collect"}
    assert "gymlab.lab.lab -> gymlab.cli.collect (lab imports top)" in upward_edges(graph)
    found = cycles(package_graph(graph))
    assert len(found) == 1 and {"gymlab.lab", "gymlab.cli"} <= set(found[0]), found
    assert not cycles(graph) or all("gymlab.cli.collect" in c for c in cycles(graph))


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, source in files.items():
        path = root / "gymlab" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
    return root / "gymlab"


def test_a_package_cycle_of_modules_without_a_module_cycle_is_reported(tmp_path):
    """lab.a -> cli.b and cli.c -> lab.d: no module imports itself back, the packages do."""
    package = _write(
        tmp_path,
        {
            "__init__.py": "",
            "lab/__init__.py": "",
            "lab/a.py": "def f():\n    from gymlab.cli import b\n",
            "lab/d.py": "",
            "cli/__init__.py": "",
            "cli/b.py": "",
            "cli/c.py": "from gymlab.lab.d import x\n",
        },
    )
    graph = import_graph(package)
    assert graph["gymlab.lab.a"] == {"gymlab.cli", "gymlab.cli.b"}
    assert graph["gymlab.cli.c"] == {"gymlab.lab.d"}
    assert cycles(graph) == []
    assert cycles(package_graph(graph)) == [["gymlab.cli", "gymlab.lab", "gymlab.cli"]]
    layers = [("lab", ["gymlab.lab"]), ("CLI", ["gymlab.cli"]), ("public API", ["gymlab"])]
    assert upward_edges(graph, layers) == [
        "gymlab.lab.a -> gymlab.cli (lab imports CLI)",
        "gymlab.lab.a -> gymlab.cli.b (lab imports CLI)",
    ]


def test_a_cycle_behind_type_checking_is_reported(tmp_path):
    package = _write(
        tmp_path,
        {
            "__init__.py": "",
            "server.py": "from gymlab.runtime import build\n",
            "runtime.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from gymlab.server import Base\n",
        },
    )
    assert cycles(import_graph(package)) == [["gymlab.runtime", "gymlab.server", "gymlab.runtime"]]


def test_the_layer_table_is_read_from_the_document():
    table = (
        "intro\n\n| layer | modules | why |\n|---|---|---|\n"
        "| low | `gymlab.protocol.*`, `errors` | the `wire` |\n| top | `lab.*`, `gymlab` | |\n\nafter | x |\n"
    )
    assert read_layers(table) == [("low", ["gymlab.protocol", "gymlab.errors"]), ("top", ["gymlab.lab", "gymlab"])]
    assert layer_of("gymlab.lab.runs", read_layers(table)) == 1
    assert layer_of("gymlab", read_layers(table)) == 1
    with pytest.raises(AssertionError, match="in no layer"):
        layer_of("gymlab.cli", read_layers(table))


# -- the suite runs from a fresh clone ------------------------------------------------------------

#: Kernel interfaces, the same on every Linux machine.
SYSTEM_PATHS = ("/proc",)


def outside_paths(source: str) -> list[str]:
    """Paths a test module reads outside the repository: ``Path("/abs")`` (but ``/proc``) and ``../shared``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None)) == "Path":
            first = node.args[0] if node.args else None
            value = first.value if isinstance(first, ast.Constant) and isinstance(first.value, str) else ""
            if value.startswith("/") and not value.startswith(SYSTEM_PATHS):
                found.append(value)
        elif isinstance(node, ast.Constant) and node.value == "shared":
            found.append("shared")  # ROOT / ".." / "shared": the folder beside the checkout
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "../shared" in node.value:
            found.append(node.value)
    return found


def test_no_test_reads_a_file_outside_the_repository():
    found = {
        str(path.relative_to(ROOT)): paths
        for path in sorted((ROOT / "tests").rglob("*.py"))
        if path != Path(__file__).resolve() and (paths := outside_paths(path.read_text()))  # this file names them
    }
    assert not found, f"tests that read outside the repository (copy the file into tests/data/): {found}"


def test_the_path_check_finds_an_absolute_path_and_the_shared_folder():
    source = (
        'A = Path("/work/shared/interop")\nB = ROOT / ".." / "shared" / "interop"\n'
        'C = Path("/proc") / "1"\nD = "/v1/agent_sessions"\n'
    )
    assert outside_paths(source) == ["/work/shared/interop", "shared"]


# -- what imports what, at run time ---------------------------------------------------------------


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", f"{code}\nimport sys; print(' '.join(sys.modules))"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    ).stdout
    return set(out.split())


SERVER_STACK = {"fastapi", "uvicorn", "aiohttp"}


def test_frames_need_only_pandas():
    assert not SERVER_STACK & _modules_after("import gymlab.lab.frames, gymlab.lab.plots")


@pytest.mark.parametrize("what", ["load", "export_sft"])
def test_reading_or_exporting_a_file_never_imports_the_server_stack(what, tmp_path):
    from gymlab.protocol import NeMoGymResponse, ResponseCreateParams, Rollout, assistant_message

    path = tmp_path / "rollouts.jsonl"
    record = Rollout(
        responses_create_params=ResponseCreateParams(input="hi"),
        response=NeMoGymResponse(output=[assistant_message("hello")]),
        reward=1.0,
    )
    path.write_text(record.model_dump_json() + "\n")
    if what == "load":
        code = f"import gymlab; rollouts = gymlab.load({str(path)!r}); assert len(rollouts) == 1"
    else:
        out = tmp_path / "sft.jsonl"
        code = f"import gymlab; gymlab.export_sft({str(path)!r}, {str(out)!r})"
    assert not SERVER_STACK & _modules_after(code)
