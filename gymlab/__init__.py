"""gymlab: a Jupyter-first research toolkit for LLM environments. The public API, loaded lazily: ``import gymlab``
loads no pandas, matplotlib, ipywidgets, FastAPI or uvicorn until a name that needs them is used."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from gymlab._version import __version__

# Each public name and the module it loads from on first use.
_NAMES: dict[str, str] = {
    name: module
    for module, names in {
        # wire types and episode sessions
        "gymlab.protocol": (
            "SESSION_ID_KEY AggregateMetrics AggregateMetricsRequest "
            "BaseRunRequest BaseSeedSessionRequest BaseSeedSessionResponse "
            "BaseVerifyRequest BaseVerifyResponse FunctionCall FunctionCallOutput "
            "Message NeMoGymResponse Reasoning ResponseCreateParams Rollout "
            "StepRecord Usage assistant_message function_call EpisodeId TaskId "
            "ResourcesSeedSessionRequest ResourcesSeedSessionResponse "
            "ResourcesCloseSessionRequest ResourcesCloseSessionResponse Failure failure_kinds"
        ),
        # session helpers and the resources server
        "gymlab.resources.simple": "lost_session_verification SimpleResourcesServer",
        "gymlab.fences": "ResourcesSessionFences",
        "gymlab.locks": "ResourcesSessionLocks",
        # errors
        "gymlab.errors": (
            "AnswerError GymlabError ServerError ServerStartError ConfigError EpisodeFailed "
            "DatasetError ResourcesSessionError ResourcesSeedRejectedError "
            "ResourcesSessionConflictError SessionContractError ForkDivergedError"
        ),
        # servers
        "gymlab.server": "BaseServer",
        "gymlab.envservers.single_agent_turn": "SingleAgentTurn",
        "gymlab.agents.simple_agent": "SimpleAgent",
        "gymlab.resources.gymnasium": "GymnasiumServer",
        "gymlab.agents.gymnasium_agent": "GymnasiumAgent",
        "gymlab.agents.embedded": "EmbeddedEnvironmentAgent",
        "gymlab.models.policy": "PolicyModel",
        "gymlab.models.openai": "OpenAIModel",
        # notebook layer
        "gymlab.lab": "Lab ServerHandle AgentHandle",
        "gymlab.lab.episode": "Episode",
        "gymlab.lab.runs": "Rollouts load",
        "gymlab.cluster.pool": "CellPool",  # lab.serve_pool: replicas on Ray (the ray extra)
        # export and reverification
        "gymlab.collection.readers": "Dataset read_jsonl",
        "gymlab.export": "export_dataset export_rl export_rollouts export_sft read_dataset",
        "gymlab.lab.reverify": "reverify",
        # reward design
        "gymlab.rewards.rubric": "Component Rubric",
        "gymlab.rewards.judge": "Judge",
        "gymlab.rewards.profile": "profile",
        # reward probes
        "gymlab.probes.report": "ProbeReport",
        "gymlab.probes.run": "probe",
        # notebook widgets
        "gymlab.lab.widgets": "EpisodeViewer LivePanel Stepper",
        # examples, and environments from other libraries (reasoning-gym, TextArena, Gymnasium)
        "gymlab.examples": "load_environment",
        "gymlab.envs": "envs",
        # configs and collection
        "gymlab.collection.config": "load_config",
        "gymlab.lab.collect": "collect",
        "gymlab.collection.runner": "acollect",
        "gymlab.collection.merge": "merge",
        # entrypoints
        "gymlab.utils": "is_gymlab_fastapi_entrypoint is_nemo_gym_fastapi_entrypoint",
        # tools and rows from a server's routes
        "gymlab.resources.tools": "tools_from rows_from",
        # an environment from plain functions (tools, verify, state by the episode)
        "gymlab.resources.light": "environment",
        # tools over MCP, both ways
        "gymlab.resources.mcp_backed": "McpResourcesServer mcp_tools_from",
        "gymlab.resources.mcp_tools": "connect_mcp",
        # agent sessions
        "gymlab.protocol.agent_sessions": (
            "AgentSeedSessionRequest AgentSeedSessionResponse AgentCloseSessionRequest AgentCloseSessionResponse"
        ),
    }.items()
    for name in names.split()
}

__all__ = sorted(["__version__", *_NAMES])


def __getattr__(name: str) -> Any:
    module = _NAMES.get(name)
    if module is None:
        raise AttributeError(f"module 'gymlab' has no attribute {name!r}")
    imported = importlib.import_module(module)
    value = imported if module == f"{__name__}.{name}" else getattr(imported, name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return __all__


# Every name of _NAMES again, for type checkers (tests/test_exported_members.py compares the two).
if TYPE_CHECKING:  # pragma: no cover
    from gymlab import envs
    from gymlab.agents.embedded import EmbeddedEnvironmentAgent
    from gymlab.agents.gymnasium_agent import GymnasiumAgent
    from gymlab.agents.simple_agent import SimpleAgent
    from gymlab.cluster.pool import CellPool
    from gymlab.collection.config import load_config
    from gymlab.collection.merge import merge
    from gymlab.collection.readers import Dataset, read_jsonl
    from gymlab.collection.runner import acollect
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
    from gymlab.lab.collect import collect
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
