"""YAML configs: the three-level shape, merging, references, built-ins, entrypoints, and errors
that name the file and the key."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gymlab.collection.config import load_config
from gymlab.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]
CALCULATOR_YAML = ROOT / "environments" / "calculator" / "configs" / "calculator.yaml"

SERVER = """
from gymlab import BaseVerifyRequest, BaseVerifyResponse, SimpleResourcesServer


class EchoServer(SimpleResourcesServer):
    greeting: str = "hi"

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=1.0)


def policy(request):
    return "hello"
"""


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


@pytest.fixture
def env_dir(tmp_path: Path) -> Path:
    write(tmp_path / "echo" / "app.py", SERVER)
    write(tmp_path / "echo" / "data" / "rows.jsonl", '{"responses_create_params": {"input": "hi"}}\n')
    return tmp_path / "echo"


def base_yaml(env_dir: Path, extra: str = "", agent_resources: str = "echo", agent_model: str = "policy_model") -> Path:
    return write(
        env_dir / "configs" / "echo.yaml",
        textwrap.dedent(f"""
        echo:
          resources_servers:
            echo:
              entrypoint: ../app.py
              domain: other
        echo_agent:
          responses_api_agents:
            simple_agent:
              resources_server: {{type: resources_servers, name: {agent_resources}}}
              model_server: {{type: responses_api_models, name: {agent_model}}}
              datasets:
              - {{name: rows, type: example, jsonl_fpath: ../data/rows.jsonl}}
        policy_model:
          responses_api_models:
            policy_model:
              policy: ../app.py:policy
    """)
        + extra,
    )


def test_the_calculator_config_loads_with_its_three_servers():
    config = load_config(CALCULATOR_YAML)
    assert {n: s.server_type for n, s in config.servers.items()} == {
        "calculator": "resources_servers",
        "calculator_simple_agent": "responses_api_agents",
        "policy_model": "responses_api_models",
    }
    agent = config.servers["calculator_simple_agent"]
    assert agent.refs == {
        "resources_server": ("resources_servers", "calculator"),
        "model_server": ("responses_api_models", "policy_model"),
    }
    assert agent.target() == "gymlab.agents.simple_agent:SimpleAgent"
    assert config.servers["calculator"].domain == "knowledge"
    assert config.datasets[0].jsonl_fpath == ROOT / "environments" / "calculator" / "data" / "example.jsonl"
    # Resources and models start before the agent that refers to them.
    assert [s.instance for s in config.launch_order()][-1] == "calculator_simple_agent"


def test_entrypoint_and_policy_are_found_relative_to_the_config_file(env_dir):
    config = load_config(base_yaml(env_dir))
    resources = config.servers["echo"]
    assert resources.server_cls().__name__ == "EchoServer"
    model = config.servers["policy_model"].build({})
    assert model.policy(None) == "hello"
    agent = config.servers["echo_agent"].build({"echo": "http://127.0.0.1:1", "policy_model": "http://127.0.0.1:2"})
    assert (agent.resources_server, agent.model_server, agent.name) == (
        "http://127.0.0.1:1",
        "http://127.0.0.1:2",
        "echo_agent",
    )


def test_later_files_deep_merge_over_earlier_ones(env_dir):
    first = base_yaml(env_dir)
    second = write(
        env_dir / "configs" / "override.yaml",
        """
        echo:
          resources_servers:
            echo:
              port: 18123
              greeting: hello
    """,
    )
    config = load_config(first, second)
    echo = config.servers["echo"]
    assert echo.fields == {"port": 18123, "greeting": "hello"}
    assert echo.domain == "other" and echo.entrypoint.endswith("app.py")  # kept from the first file
    assert echo.build({}).greeting == "hello"


def test_a_dangling_resources_server_names_the_file_and_key(env_dir):
    path = base_yaml(env_dir, agent_resources="nope")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    message = str(err.value)
    assert str(path) in message
    assert "echo_agent.responses_api_agents.simple_agent.resources_server.name" in message
    assert "'nope'" in message and "defined resources_servers: echo" in message


def test_a_dangling_model_server_names_the_file_and_key(env_dir):
    path = base_yaml(env_dir, agent_model="gpt")
    with pytest.raises(
        ConfigError,
        match=r"echo\.yaml: echo_agent\.responses_api_agents\.simple_agent\.model_server\.name: "
        r"refers to responses_api_models 'gpt'",
    ):
        load_config(path)


def test_a_reference_to_an_instance_of_another_type_is_refused(env_dir):
    path = base_yaml(env_dir, agent_resources="policy_model")
    with pytest.raises(ConfigError, match="'policy_model' is a responses_api_models instance"):
        load_config(path)


def test_an_unknown_server_type_names_the_file_and_key(env_dir):
    path = base_yaml(env_dir, extra="judge:\n  judge_servers:\n    x: {}\n")
    with pytest.raises(ConfigError) as err:
        load_config(path)
    assert f"{path}: judge.judge_servers: unknown server type 'judge_servers'" in str(err.value)


def test_an_unknown_field_names_the_file_and_key(env_dir):
    path = base_yaml(
        env_dir, extra="other:\n  resources_servers:\n    other:\n      entrypoint: ../app.py\n      greting: typo\n"
    )
    spec = load_config(path).servers["other"]
    with pytest.raises(
        ConfigError, match=r"echo\.yaml: other\.resources_servers\.other\.greting: unknown key for EchoServer"
    ):
        spec.check_fields()


def test_a_missing_entrypoint_file_is_named(env_dir):
    path = base_yaml(env_dir, extra="other:\n  resources_servers:\n    other:\n      entrypoint: ../missing.py\n")
    spec = load_config(path).servers["other"]
    with pytest.raises(ConfigError, match=r"other\.resources_servers\.other: entrypoint .*missing\.py does not exist"):
        spec.server_cls()


def test_a_module_with_two_server_classes_needs_server_class(env_dir):
    write(env_dir / "two.py", SERVER + "\n\nclass OtherServer(EchoServer):\n    pass\n")
    extra = "two:\n  resources_servers:\n    two:\n      entrypoint: ../two.py\n"
    with pytest.raises(ConfigError, match="defines 2 server classes .*name one with 'server_class"):
        load_config(base_yaml(env_dir, extra=extra)).servers["two"].server_cls()
    picked = load_config(base_yaml(env_dir, extra=extra + "      server_class: OtherServer\n"))
    assert picked.servers["two"].server_cls().__name__ == "OtherServer"


def test_a_builtin_resolves_lazily_and_a_missing_one_says_so(env_dir):
    extra = "env:\n  environment_servers:\n    single_agent_turn: {}\n"
    spec = load_config(base_yaml(env_dir, extra=extra)).servers["env"]  # loading never imports it
    assert spec.target() == "gymlab.envservers.single_agent_turn"
    try:
        cls = spec.server_cls()
    except ConfigError as exc:
        assert "env.environment_servers.single_agent_turn" in str(exc) and "not available" in str(exc)
    else:
        assert cls.__module__ == "gymlab.envservers.single_agent_turn"


def test_a_non_builtin_without_entrypoint_is_refused(env_dir):
    path = base_yaml(env_dir, extra="other:\n  resources_servers:\n    other: {}\n")
    with pytest.raises(ConfigError, match="no entrypoint, and 'other' is not a built-in resources_servers"):
        load_config(path).servers["other"].target()


def test_a_taskset_must_be_routed_to_an_environment_server(env_dir):
    write(
        env_dir / "configs" / "ts.yaml",
        """
        echo:
          resources_servers:
            echo:
              datasets:
              - {name: bench, type: benchmark, taskset: echo_bench, jsonl_fpath: ../data/rows.jsonl}
    """,
    )
    with pytest.raises(
        ConfigError, match=r"dataset 'bench'\.taskset: 'echo_bench' is not mapped in environment_server_routes"
    ):
        load_config(base_yaml(env_dir), env_dir / "configs" / "ts.yaml")
    bad_route = write(env_dir / "configs" / "route.yaml", "environment_server_routes:\n  echo_bench: echo\n")
    with pytest.raises(
        ConfigError,
        match=r"route\.yaml: environment_server_routes\.echo_bench: 'echo' is not an "
        "environment_servers instance",
    ):
        load_config(base_yaml(env_dir), env_dir / "configs" / "ts.yaml", bad_route)


def test_invalid_yaml_names_the_line(tmp_path):
    path = write(tmp_path / "bad.yaml", "a:\n  b: [1, 2\nc: 3\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml:\d+: not valid YAML"):
        load_config(path)


def test_a_reference_cycle_is_refused(env_dir):
    extra = (
        "a:\n  responses_api_agents:\n    simple_agent:\n      model_server: {type: responses_api_agents, name: b}\n"
        "b:\n  responses_api_agents:\n    simple_agent:\n      model_server: {type: responses_api_agents, name: a}\n"
    )
    with pytest.raises(ConfigError, match="cycle: a -> b -> a"):
        load_config(base_yaml(env_dir, extra=extra)).launch_order()


def test_a_taskset_dataset_must_belong_to_a_server_its_environment_server_binds(env_dir):
    ts = write(
        env_dir / "configs" / "ts.yaml",
        """
        environment_server_routes: {echo_bench: env}
        env:
          environment_servers:
            single_agent_turn:
              agent_server: {type: responses_api_agents, name: echo_agent}
        echo:
          resources_servers:
            echo:
              datasets:
              - {name: bench, type: benchmark, taskset: echo_bench, jsonl_fpath: ../data/rows.jsonl}
    """,
    )
    with pytest.raises(
        ConfigError,
        match=r"echo dataset 'bench'\.taskset: 'echo_bench' routes to env, which does "
        r"not bind echo \(it binds echo_agent\)",
    ):
        load_config(base_yaml(env_dir), ts)
