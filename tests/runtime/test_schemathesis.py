"""Schema-driven fuzzing (schemathesis) of every built-in server over real loopback uvicorn servers:
valid and invalid bodies for every operation of its OpenAPI schema, no answer is a 5xx, and no body
names a file path of this machine.

Every example environment is fuzzed (its resources server, or its own agent for an agent-embedded
one), and so is the agent that drives it (``simple_agent`` or ``gymnasium_agent`` bound to it), both
model servers (``policy_model``; ``openai_model`` in front of a local OpenAI-compatible endpoint),
``single_agent_turn``, and the environment adapters whose library is installed (reasoning-gym,
TextArena, Gymnasium), each with its agent.

Excluded: a 502 (Bad Gateway) from an agent or environment server, a JSON answer saying its upstream
(resources, model or agent server) failed on the fuzzed input it forwarded; each upstream is fuzzed
directly here. The model server runs a policy that always answers "done", so a 5xx is the server's,
not a policy's that cannot read random prompts. Bounded: ``MAX_EXAMPLES`` derandomized cases per
operation and generation mode.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode

from gymlab.agents.base import BaseAgent
from gymlab.envs.extras import installed
from gymlab.envservers.single_agent_turn import SingleAgentTurn
from gymlab.examples import ENVIRONMENTS_DIR, load_environment
from gymlab.lab import AgentHandle
from gymlab.models.openai import OpenAIModel
from gymlab.resources.gymnasium import GymnasiumServer
from tests.openai_upstream import OpenAIUpstream

MAX_EXAMPLES = 15
#: Cases per operation and mode for the servers added later (the adapters, the OpenAI proxy): fewer, so the
#: whole file stays within its time.
MAX_EXAMPLES_ADDED = 5
ENVIRONMENTS = sorted(p.name for p in ENVIRONMENTS_DIR.iterdir() if (p / "app.py").exists())
#: The environments served by a resources server (the rest are agents that embed their environment).
WITH_RESOURCES = ["blackjack", "calculator", "calculator_gym", "counter", "mcp_notes", "open_qa", "qa", "stateless"]
#: The environment adapters (``gymlab.envs``), each made as a researcher makes it; fuzzed where installed.
ADAPTERS = {
    "reasoning_gym": lambda envs: envs.reasoning_gym("basic_arithmetic", size=4),
    "textarena": lambda envs: envs.textarena("GuessTheNumber-v0"),
    "gymnasium": lambda envs: envs.gymnasium("FrozenLake-v1"),
}
#: Folders whose names no answer may carry (the repository, the venv, the working and temporary folders).
FOLDERS = sorted(
    {str(Path(__file__).resolve().parents[2]), sys.prefix, os.getcwd(), "/tmp/", "site-packages", "/home/", "/root/"}
)


def _server_class(module):
    from gymlab.server import BaseServer

    classes = [
        v
        for v in vars(module).values()
        if isinstance(v, type) and issubclass(v, BaseServer) and v.__module__ == module.__name__
    ]
    assert len(classes) == 1, f"{module.__name__}: expected one server class, found {classes}"
    return classes[0]


def _serve(lab, name: str):
    """Start ``name`` (and what it calls) on loopback; its URL."""
    model = lab.serve_model(lambda request: "done")
    if name == "policy_model":
        return model.url
    if name == "openai_model":
        upstream = lab.serve(OpenAIUpstream, policy=lambda request: "done")
        return lab.serve(OpenAIModel, base_url=upstream.url + "/v1", max_retries=0).url
    adapter, _, role = name.partition("/")
    if adapter in ADAPTERS:
        import gymlab.envs as envs

        server, _rows = ADAPTERS[adapter](envs)
        env = lab.serve(server)
        if role != "agent":
            return env.url
        agent = "gymnasium_agent" if isinstance(server, GymnasiumServer) else "simple_agent"
        return lab.serve_agent(agent, resources=env, model=model, max_steps=4).url
    env_name, _, role = name.partition("/")
    if env_name == "single_agent_turn":
        env = lab.serve(load_environment("counter").CounterServer)
        agent = lab.serve_agent("simple_agent", resources=env, model=model, max_steps=4)
        return lab.serve(SingleAgentTurn, handle_cls=AgentHandle, resources_server=env.url, agent_server=agent.url).url
    module = load_environment(env_name)
    cls = _server_class(module)
    if issubclass(cls, BaseAgent):  # an agent-embedded environment
        return lab.serve_agent(cls, model=model).url
    config = {}
    if env_name == "open_qa":  # its judge: the environment's own rule-based judge model
        config["judge_model"] = lab.serve_model(module.judge_policy, name="judge_model").url
    env = lab.serve(cls, **config)
    if role != "agent":
        return env.url
    agent = "gymnasium_agent" if issubclass(cls, GymnasiumServer) else "simple_agent"
    return lab.serve_agent(agent, resources=env, model=model, max_steps=4).url


def _upstream_failure(response) -> bool:
    if response.status_code != 502:
        return False
    try:
        body = response.json()
    except ValueError:
        return False
    return isinstance(body, dict) and "server" in body and "route" in body


def _paths_in(text: str) -> list[str]:
    return [folder for folder in FOLDERS if folder in text]


def _sent(case) -> str:
    """What the request itself carried: hypothesis draws strings from the constants of the code it
    runs (this file's ``FOLDERS`` among them), and an answer that echoes its input names them rightly."""
    parts = [case.body, case.query, case.path_parameters, case.headers, case.cookies]
    return json.dumps(parts, ensure_ascii=False, default=str)


@pytest.mark.parametrize(
    "name",
    [
        *ENVIRONMENTS,
        *(f"{e}/agent" for e in WITH_RESOURCES),
        "policy_model",
        "openai_model",
        "single_agent_turn",
        *(f"{a}{role}" for a in ADAPTERS for role in ("", "/agent")),
    ],
)
def test_no_input_gets_a_server_error(lab, name):
    assert set(WITH_RESOURCES) <= set(ENVIRONMENTS)
    if name.partition("/")[0] in ADAPTERS and not installed(name.partition("/")[0]):
        pytest.skip(f"the {name.partition('/')[0]} extra is not installed")
    added = name.partition("/")[0] in (*ADAPTERS, "openai_model")
    url = _serve(lab, name)
    schema = schemathesis.openapi.from_url(url + "/openapi.json")
    errors: list[str] = []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert operations
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @settings(
                max_examples=MAX_EXAMPLES_ADDED if added else MAX_EXAMPLES,
                derandomize=True,
                deadline=None,
                database=None,
                suppress_health_check=list(HealthCheck),
                phases=[Phase.explicit, Phase.generate],
            )  # no shrinking: report, don't minimise
            @given(case=operation.as_strategy(generation_mode=mode))
            def fuzz(case):
                response = case.call(base_url=url, timeout=30)
                if paths := [p for p in _paths_in(response.text) if p not in _sent(case)]:
                    errors.append(
                        f"{case.method} {case.path} ({mode.value}) -> {response.status_code} names {paths}: "  # noqa: B023
                        f"{response.text[:600]}"
                    )
                if response.status_code < 500 or _upstream_failure(response):
                    return
                errors.append(
                    f"{case.method} {case.path} ({mode.value}) body={case.body!r:.300} -> "  # noqa: B023 (fuzz runs in this iteration)
                    f"{response.status_code} {response.text[:300]}"
                )

            try:
                fuzz()
            except Unsatisfiable:  # nothing to make invalid (no body, no parameters)
                assert mode is GenerationMode.NEGATIVE, f"{operation.label}: no valid input can be generated"
    assert not errors, f"{name}: {len(errors)} server errors or file paths:\n" + "\n".join(errors[:10])
