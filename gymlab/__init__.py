"""gymlab: a Jupyter-first research toolkit for LLM environments. The public API, loaded lazily: ``import gymlab``
loads no pandas, matplotlib, ipywidgets, FastAPI or uvicorn until a name that needs them is used. The
``TYPE_CHECKING`` block below is the one list of public names: type checkers read it, and ``_NAMES`` is read
from it."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import TYPE_CHECKING

from gymlab._lazy import lazy_names
from gymlab._version import __version__


def _public_names() -> dict[str, str]:
    """Each public name and the module it loads from on first use, as this file's ``TYPE_CHECKING`` block imports it."""
    tree = ast.parse(Path(__file__).read_text(encoding="utf-8"))
    block = next(n for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", None) == "TYPE_CHECKING")
    return {
        alias.name: f"{node.module}.{alias.name}" if node.module == __name__ else node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }


_NAMES = _public_names()
__all__ = sorted(["__version__", *_NAMES])
__getattr__, __dir__ = lazy_names(__name__, _NAMES, globals())

if TYPE_CHECKING:  # pragma: no cover
    from gymlab import envs
    from gymlab.agents.embedded import EmbeddedEnvironmentAgent
    from gymlab.agents.gymnasium_agent import GymnasiumAgent
    from gymlab.agents.simple_agent import SimpleAgent
    from gymlab.cluster.pool import CellPool
    from gymlab.collection.config import load_config
    from gymlab.collection.merge import merge
    from gymlab.collection.readers import Dataset, read_jsonl
    from gymlab.collection.runner import acollect, collect
    from gymlab.envservers.single_agent_turn import SingleAgentTurn
    from gymlab.errors import (
        AnswerError,
        ConfigError,
        DatasetError,
        EpisodeFailed,
        ForkDivergedError,
        GymlabError,
        ResourcesSeedRejectedError,
        ResourcesSessionConflictError,
        ResourcesSessionError,
        ServerError,
        ServerStartError,
        SessionContractError,
    )
    from gymlab.examples import load_environment
    from gymlab.export import export_dataset, export_rl, export_rollouts, export_sft, read_dataset
    from gymlab.fences import ResourcesSessionFences
    from gymlab.lab import AgentHandle, Lab, ServerHandle
    from gymlab.lab.episode import Episode
    from gymlab.lab.reverify import reverify
    from gymlab.lab.runs import Rollouts, load
    from gymlab.lab.widgets import EpisodeViewer, LivePanel, Stepper
    from gymlab.locks import ResourcesSessionLocks
    from gymlab.models.openai import OpenAIModel
    from gymlab.models.policy import PolicyModel
    from gymlab.probes.report import ProbeReport
    from gymlab.probes.run import probe
    from gymlab.protocol import (
        SESSION_ID_KEY,
        AggregateMetrics,
        AggregateMetricsRequest,
        BaseRunRequest,
        BaseSeedSessionRequest,
        BaseSeedSessionResponse,
        BaseVerifyRequest,
        BaseVerifyResponse,
        EpisodeId,
        Failure,
        FunctionCall,
        FunctionCallOutput,
        Message,
        NeMoGymResponse,
        Reasoning,
        ResourcesCloseSessionRequest,
        ResourcesCloseSessionResponse,
        ResourcesSeedSessionRequest,
        ResourcesSeedSessionResponse,
        ResponseCreateParams,
        Rollout,
        StepRecord,
        TaskId,
        Usage,
        assistant_message,
        failure_kinds,
        function_call,
    )
    from gymlab.protocol.agent_sessions import (
        AgentCloseSessionRequest,
        AgentCloseSessionResponse,
        AgentSeedSessionRequest,
        AgentSeedSessionResponse,
    )
    from gymlab.resources.gymnasium import GymnasiumServer
    from gymlab.resources.light import environment
    from gymlab.resources.mcp_backed import McpResourcesServer, mcp_tools_from
    from gymlab.resources.mcp_tools import connect_mcp
    from gymlab.resources.simple import SimpleResourcesServer, lost_session_verification
    from gymlab.resources.tools import rows_from, tools_from
    from gymlab.rewards.judge import Judge
    from gymlab.rewards.profile import profile
    from gymlab.rewards.rubric import Component, Rubric
    from gymlab.server import BaseServer
    from gymlab.utils import is_gymlab_fastapi_entrypoint, is_nemo_gym_fastapi_entrypoint
