"""gymlab: a Jupyter-first research toolkit for LLM environments.

The public API. Names load lazily, so ``import gymlab`` stays light (no pandas, matplotlib,
ipywidgets, FastAPI or uvicorn until a name that needs them is used).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from gymlab._version import __version__

_NAMES: dict[str, str] = {
    # wire types
    "SESSION_ID_KEY": "gymlab.protocol",
    "AggregateMetrics": "gymlab.protocol",
    "AggregateMetricsRequest": "gymlab.protocol",
    "BaseRunRequest": "gymlab.protocol",
    "BaseSeedSessionRequest": "gymlab.protocol",
    "BaseSeedSessionResponse": "gymlab.protocol",
    "BaseVerifyRequest": "gymlab.protocol",
    "BaseVerifyResponse": "gymlab.protocol",
    "FunctionCall": "gymlab.protocol",
    "FunctionCallOutput": "gymlab.protocol",
    "Message": "gymlab.protocol",
    "NeMoGymResponse": "gymlab.protocol",
    "Reasoning": "gymlab.protocol",
    "ResponseCreateParams": "gymlab.protocol",
    "Rollout": "gymlab.protocol",
    "StepRecord": "gymlab.protocol",
    "Usage": "gymlab.protocol",
    "assistant_message": "gymlab.protocol",
    "function_call": "gymlab.protocol",
    # episode sessions
    "EpisodeId": "gymlab.protocol",
    "TaskId": "gymlab.protocol",
    "ResourcesSeedSessionRequest": "gymlab.protocol",
    "ResourcesSeedSessionResponse": "gymlab.protocol",
    "ResourcesCloseSessionRequest": "gymlab.protocol",
    "ResourcesCloseSessionResponse": "gymlab.protocol",
    "lost_session_verification": "gymlab.resources.simple",
    "ResourcesSessionFences": "gymlab._runtime.fences",
    "ResourcesSessionLocks": "gymlab._runtime.locks",
    # errors
    "GymlabError": "gymlab.errors",
    "ServerError": "gymlab.errors",
    "ServerStartError": "gymlab.errors",
    "ConfigError": "gymlab.errors",
    "EpisodeFailed": "gymlab.errors",
    "DatasetError": "gymlab.errors",
    "ResourcesSessionError": "gymlab.errors",
    "ResourcesSeedRejectedError": "gymlab.errors",
    "ResourcesSessionConflictError": "gymlab.errors",
    "SessionContractError": "gymlab.errors",
    # servers
    "BaseServer": "gymlab.server",
    "SimpleResourcesServer": "gymlab.resources.simple",
    "SingleAgentTurn": "gymlab.envservers.single_agent_turn",
    "SimpleAgent": "gymlab.agents.simple_agent",
    "GymnasiumServer": "gymlab.resources.gymnasium",
    "GymnasiumAgent": "gymlab.agents.gymnasium_agent",
    "EmbeddedEnvironmentAgent": "gymlab.agents.embedded",
    "PolicyModel": "gymlab.models.policy",
    "OpenAIModel": "gymlab.models.openai",
    # notebook layer
    "Lab": "gymlab.lab",
    "ServerHandle": "gymlab.lab",
    "AgentHandle": "gymlab.lab",
    "Episode": "gymlab.lab.episode",
    "Rollouts": "gymlab.lab.runs",
    "CellPool": "gymlab.cluster.pool",  # lab.serve_pool: replicas on Ray (the ray extra)
    "ForkDivergedError": "gymlab.errors",
    # failures
    "Failure": "gymlab.failure_kinds",
    "failure_kinds": "gymlab.failure_kinds",
    # export and reverification
    "Dataset": "gymlab.collection.readers",
    "export_dataset": "gymlab.export",
    "export_rl": "gymlab.export",
    "export_rollouts": "gymlab.export",
    "export_sft": "gymlab.export",
    "load": "gymlab.lab.runs",
    "read_dataset": "gymlab.export",
    "read_jsonl": "gymlab.collection.readers",
    "reverify": "gymlab.lab.reverify",
    # reward design
    "Component": "gymlab.rewards.rubric",
    "Judge": "gymlab.rewards.judge",
    "Rubric": "gymlab.rewards.rubric",
    "profile": "gymlab.rewards.profile",
    # reward probes
    "ProbeReport": "gymlab.probes.report",
    "probe": "gymlab.probes.run",
    # notebook widgets
    "EpisodeViewer": "gymlab.lab.widgets",
    "LivePanel": "gymlab.lab.widgets",
    "Stepper": "gymlab.lab.widgets",
    # examples
    "load_environment": "gymlab.examples",
    # configs and collection
    "load_config": "gymlab.collection.config",
    "collect": "gymlab.lab.collect",
    "acollect": "gymlab.collection.runner",
    "merge": "gymlab.collection.merge",
    # entrypoints
    "is_gymlab_fastapi_entrypoint": "gymlab.utils",
    "is_nemo_gym_fastapi_entrypoint": "gymlab.utils",
    # tools and rows from a server's routes
    "tools_from": "gymlab.resources.tools",
    "rows_from": "gymlab.resources.tools",
    # tools over MCP, both ways
    "McpResourcesServer": "gymlab.resources.mcp_backed",
    "mcp_tools_from": "gymlab.resources.mcp_backed",
    "connect_mcp": "gymlab.resources.mcp_tools",
    # agent sessions
    "AgentSeedSessionRequest": "gymlab.protocol.agent_sessions",
    "AgentSeedSessionResponse": "gymlab.protocol.agent_sessions",
    "AgentCloseSessionRequest": "gymlab.protocol.agent_sessions",
    "AgentCloseSessionResponse": "gymlab.protocol.agent_sessions",
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
    from gymlab import failure_kinds
    from gymlab._runtime.fences import ResourcesSessionFences
    from gymlab._runtime.locks import ResourcesSessionLocks
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
    from gymlab.failure_kinds import Failure
    from gymlab.lab import AgentHandle, Lab, ServerHandle
    from gymlab.lab.collect import collect
    from gymlab.lab.episode import Episode
    from gymlab.lab.reverify import reverify
    from gymlab.lab.runs import Rollouts, load
    from gymlab.lab.widgets import EpisodeViewer, LivePanel, Stepper
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
        function_call,
    )
    from gymlab.protocol.agent_sessions import (
        AgentCloseSessionRequest,
        AgentCloseSessionResponse,
        AgentSeedSessionRequest,
        AgentSeedSessionResponse,
    )
    from gymlab.resources.gymnasium import GymnasiumServer
    from gymlab.resources.mcp_backed import McpResourcesServer, mcp_tools_from
    from gymlab.resources.mcp_tools import connect_mcp
    from gymlab.resources.simple import SimpleResourcesServer, lost_session_verification
    from gymlab.resources.tools import rows_from, tools_from
    from gymlab.rewards.judge import Judge
    from gymlab.rewards.profile import profile
    from gymlab.rewards.rubric import Component, Rubric
    from gymlab.server import BaseServer
    from gymlab.utils import is_gymlab_fastapi_entrypoint, is_nemo_gym_fastapi_entrypoint
