"""Imports point down the layers, and no two modules import each other.

Every module under ``gymlab/`` is parsed with ``ast``; every import statement is an edge, including
imports inside functions (a lazy import still ties the two modules together). Imports under
``if TYPE_CHECKING:`` are not edges: they never run. The layer table is docs/architecture.md's
"Modules and layers", lowest first.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "gymlab"

#: Lowest first. A module belongs to the first entry that equals its name or is a package above it.
LAYERS: list[tuple[str, list[str]]] = [
    ("version", ["gymlab._version"]),
    ("wire types", ["gymlab.protocol"]),
    ("errors and failure vocabulary", ["gymlab.errors", "gymlab.failure_kinds"]),
    (
        "runtime helpers",
        [
            "gymlab._sync",
            "gymlab._traces",
            "gymlab.retry",
            "gymlab.jsonl",
            "gymlab.failures",
            "gymlab.inproc",
            "gymlab.http1",
            "gymlab.client",
        ],
    ),
    ("server runtime", ["gymlab.server", "gymlab._runtime", "gymlab.utils"]),
    ("loop", ["gymlab.loop"]),
    ("rewards", ["gymlab.rewards"]),
    (
        "servers",
        [
            "gymlab.resources",
            "gymlab.models",
            "gymlab.agents",
            "gymlab.envservers",
            "gymlab.testing",
            "gymlab.gym_interop",
            "gymlab.examples",
            "gymlab.registry",
        ],
    ),
    ("collection", ["gymlab.collection", "gymlab.export"]),
    (
        "notebook and CLI",
        ["gymlab.lab", "gymlab.probes", "gymlab.cluster", "gymlab.cli", "gymlab.__main__"],
    ),
    ("public API", ["gymlab"]),
]


def module_names() -> dict[str, Path]:
    """Every module under gymlab/, by dotted name (a package is its ``__init__``)."""
    names = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join(parts)] = path
    return names


def layer_of(module: str) -> int:
    for index, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if prefix != "gymlab" and (module == prefix or module.startswith(prefix + ".")):
                return index
    if module == "gymlab":
        return len(LAYERS) - 1
    raise AssertionError(f"{module} is in no layer: add it to LAYERS here and to the table in docs/architecture.md")


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imports_of(module: str, path: Path, known: set[str]) -> set[str]:
    """The gymlab modules ``module`` imports, wherever the import statement is."""
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            for alias in node.names:
                found.add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            for alias in node.names:
                if f"{target}.{alias.name}" in known:
                    found.add(f"{target}.{alias.name}")
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {name for name in found if name in known and name != module}


def import_graph() -> dict[str, set[str]]:
    modules = module_names()
    known = set(modules)
    return {name: imports_of(name, path, known) for name, path in modules.items()}


def upward_edges(graph: dict[str, set[str]]) -> list[str]:
    return sorted(
        f"{a} -> {b} ({LAYERS[layer_of(a)][0]} imports {LAYERS[layer_of(b)][0]})"
        for a, targets in graph.items()
        for b in targets
        if layer_of(b) > layer_of(a)
    )


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle per strongly connected component of more than one module (Tarjan)."""
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


def test_every_module_has_a_layer():
    for module in module_names():
        layer_of(module)


def test_no_import_points_up():
    upward = upward_edges(import_graph())
    assert not upward, "imports that point up the layers:\n" + "\n".join(upward)


def test_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles:\n" + "\n".join(" -> ".join(c) for c in found)


def test_the_checker_reports_an_added_upward_edge_and_cycle():
    graph = import_graph()
    graph["gymlab.protocol.record"] = graph["gymlab.protocol.record"] | {"gymlab.lab.frames"}
    assert any(e.startswith("gymlab.protocol.record -> gymlab.lab.frames ") for e in upward_edges(graph))
    assert ["gymlab.lab.frames", "gymlab.protocol.record", "gymlab.lab.frames"] in cycles(graph) or any(
        "gymlab.protocol.record" in c and "gymlab.lab.frames" in c for c in cycles(graph)
    )


def test_the_checker_sees_lazy_imports_and_skips_type_checking_ones(tmp_path):
    source = tmp_path / "mod.py"
    source.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from gymlab.lab import frames\n"
        "def f():\n    from gymlab.cli import main\n"
        "from . import sibling\n"
    )
    known = {"gymlab.lab", "gymlab.lab.frames", "gymlab.cli", "gymlab.protocol.sibling"}
    assert imports_of("gymlab.protocol.mod", source, known) == {"gymlab.cli", "gymlab.protocol.sibling"}


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
