"""The public surface: ``__all__`` pinned, every name resolves, nothing private, ``import gymlab`` stays light."""

import inspect
import subprocess
import sys

import gymlab

HEAVY = [
    "pandas",
    "matplotlib",
    "ipywidgets",
    "gymnasium",
    "openai",
    "fastapi",
    "uvicorn",
    "aiohttp",
    "mcp",
    "ray",
    "torch",
    "transformers",
    "trl",
]


#: The public API, sorted. Adding or removing a name is a decision: change it here on purpose.
EXPORTED = [
    "AgentCloseSessionRequest",
    "AgentCloseSessionResponse",
    "AgentHandle",
    "AgentSeedSessionRequest",
    "AgentSeedSessionResponse",
    "AggregateMetrics",
    "AggregateMetricsRequest",
    "AnswerError",
    "BaseRunRequest",
    "BaseSeedSessionRequest",
    "BaseSeedSessionResponse",
    "BaseServer",
    "BaseVerifyRequest",
    "BaseVerifyResponse",
    "CellPool",
    "Component",
    "ConfigError",
    "Dataset",
    "DatasetError",
    "EmbeddedEnvironmentAgent",
    "Episode",
    "EpisodeFailed",
    "EpisodeId",
    "EpisodeViewer",
    "Failure",
    "ForkDivergedError",
    "FunctionCall",
    "FunctionCallOutput",
    "GymlabError",
    "GymnasiumAgent",
    "GymnasiumServer",
    "Judge",
    "Lab",
    "LivePanel",
    "McpResourcesServer",
    "Message",
    "NeMoGymResponse",
    "OpenAIModel",
    "PolicyModel",
    "ProbeReport",
    "Reasoning",
    "ResourcesCloseSessionRequest",
    "ResourcesCloseSessionResponse",
    "ResourcesSeedRejectedError",
    "ResourcesSeedSessionRequest",
    "ResourcesSeedSessionResponse",
    "ResourcesSessionConflictError",
    "ResourcesSessionError",
    "ResourcesSessionFences",
    "ResourcesSessionLocks",
    "ResponseCreateParams",
    "Rollout",
    "Rollouts",
    "Rubric",
    "SESSION_ID_KEY",
    "ServerError",
    "ServerHandle",
    "ServerStartError",
    "SessionContractError",
    "SimpleAgent",
    "SimpleResourcesServer",
    "SingleAgentTurn",
    "StepRecord",
    "Stepper",
    "TaskId",
    "Usage",
    "__version__",
    "acollect",
    "assistant_message",
    "collect",
    "connect_mcp",
    "environment",
    "envs",
    "export_dataset",
    "export_rl",
    "export_rollouts",
    "export_sft",
    "failure_kinds",
    "function_call",
    "is_gymlab_fastapi_entrypoint",
    "is_nemo_gym_fastapi_entrypoint",
    "load",
    "load_config",
    "load_environment",
    "lost_session_verification",
    "mcp_tools_from",
    "merge",
    "probe",
    "profile",
    "read_dataset",
    "read_jsonl",
    "reverify",
    "rows_from",
    "tools_from",
]


def test_all_is_pinned():
    assert gymlab.__all__ == EXPORTED
    assert sorted(dir(gymlab)) == sorted(EXPORTED)


def test_no_exported_name_comes_from_a_private_module():
    for name in EXPORTED:
        value = getattr(gymlab, name)
        module = value.__name__ if inspect.ismodule(value) else getattr(value, "__module__", None) or "gymlab"
        assert not any(part.startswith("_") for part in module.split(".")), f"{name} comes from {module}"


def test_every_exported_name_resolves():
    for name in gymlab.__all__:
        assert getattr(gymlab, name) is not None, name


def test_import_is_light():
    code = f"import sys, gymlab; print(','.join(m for m in {HEAVY!r} if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"import gymlab loaded: {out}"


def test_lab_import_leaves_data_and_plot_libraries_unloaded():
    code = "import sys, gymlab; gymlab.Lab; print(','.join(m for m in ('pandas','matplotlib','ipywidgets','torch','transformers') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


def test_unknown_name_is_an_attribute_error():
    import pytest

    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        gymlab.Nope  # noqa: B018


def test_session_fences_and_locks_are_public_and_constructible():
    """The spec tells a server author to construct both (``from gymlab import ...``)."""
    import asyncio

    fences = gymlab.ResourcesSessionFences(window_seconds=300)
    fences.fence("rs-1")
    assert "rs-1" in fences and "rs-2" not in fences and 0 < fences.remaining("rs-1") <= 300
    locks, order = gymlab.ResourcesSessionLocks(), []

    async def seed_then_close():
        async def hold(name):
            async with locks("rs-1"):
                order.append(f"{name} in")
                await asyncio.sleep(0)
                order.append(f"{name} out")

        await asyncio.gather(hold("seed"), hold("close"))

    asyncio.run(seed_then_close())
    assert order == ["seed in", "seed out", "close in", "close out"] and len(locks) == 0


def _type_checking_names() -> set[tuple[str, str]]:
    """(name, module) for every import under ``if TYPE_CHECKING:`` in gymlab/__init__.py."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(gymlab.__file__).read_text())
    blocks = [n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", None) == "TYPE_CHECKING"]
    assert len(blocks) == 1, "gymlab/__init__.py has one `if TYPE_CHECKING:` block"
    found = set()
    for node in ast.walk(blocks[0]):
        if isinstance(node, ast.Import):
            found.update((alias.asname or alias.name, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            for alias in node.names:
                assert alias.name != "*", "a star import hides which names a type checker sees"
                full = f"{node.module}.{alias.name}"
                found.add((alias.asname or alias.name, full if full in gymlab._NAMES.values() else node.module))
    return found


def test_type_checkers_see_every_public_name_where_it_loads_from():
    """The ``TYPE_CHECKING`` block imports exactly the lazy map's names, each from the module it loads from."""
    lazy = set(gymlab._NAMES.items())
    seen = _type_checking_names()
    assert seen == lazy, f"only in the lazy map: {sorted(lazy - seen)}; only for type checkers: {sorted(seen - lazy)}"
    assert sorted({name for name, _ in seen} | {"__version__"}) == EXPORTED
