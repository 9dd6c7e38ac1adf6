"""OpenEnv both ways: its environments served by gymlab.envs.openenv and played by gymnasium_agent equal
direct use; gymlab's environments served by OpenEnv's own server and driven by its GenericEnvClient
equal gymlab's own agents on the same moves. The openenv extra cannot be installed beside the mcp
extra (pyproject.toml), so this file runs only where it is installed."""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import threading

import pytest

pytest.importorskip(
    "openenv.core.env_server.http_server", reason="the openenv extra is not installed here", exc_type=ImportError
)

from fastmcp import FastMCP  # noqa: E402  (openenv's own dependency)
from openenv.core.env_server.interfaces import Environment  # noqa: E402
from openenv.core.env_server.mcp_environment import MCPEnvironment  # noqa: E402
from openenv.core.env_server.mcp_types import CallToolAction  # noqa: E402
from openenv.core.env_server.types import Action, Observation, State  # noqa: E402
from openenv.core.generic_client import GenericEnvClient  # noqa: E402

from gymlab import envs, function_call  # noqa: E402
from gymlab._runtime.serve import ThreadedServer  # noqa: E402
from gymlab.envs.as_openenv import openenv_app  # noqa: E402
from gymlab.examples import example_rows, load_environment  # noqa: E402
from gymlab.registry import builtin_class  # noqa: E402
from gymlab.testing.workers import wait_until  # noqa: E402

MESSAGES = ["hello", "a longer message", "", "x" * 300, "échos ☃"]


@pytest.fixture(scope="module")
def echo(tmp_path_factory):
    """The environment `openenv init` makes (its scaffold: an echo environment), imported as a package."""
    root = tmp_path_factory.mktemp("scaffold")
    env = {**os.environ, "PATH": os.path.dirname(sys.executable)}  # no uv on PATH: no lock file fetched
    subprocess.run(
        [sys.executable, "-m", "openenv.cli", "init", "echo_env", "-o", str(root)],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    sys.path.insert(0, str(root))
    try:
        from echo_env.models import EchoAction
        from echo_env.server.echo_env_environment import EchoEnvironment
    finally:
        sys.path.remove(str(root))
    return EchoEnvironment, EchoAction


class GuessEnv(MCPEnvironment):
    """Written with OpenEnv's classes: one MCP tool, ``guess``; solved (reward 1, done) at the number."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        mcp = FastMCP("guess")
        self._target, self._solved, self._state = 0, False, State(step_count=0)

        @mcp.tool
        def guess(n: int) -> str:
            """Guess the hidden number (1-10)."""
            self._state.step_count += 1
            self._solved = n == self._target
            return "correct" if self._solved else "higher" if n < self._target else "lower"

        super().__init__(mcp)

    def reset(self, seed=None, episode_id=None, **kwargs):
        self._target, self._solved, self._state = 1 + (seed or 0) % 10, False, State(step_count=0)
        return Observation(done=False, reward=0.0)

    async def step_async(self, action, timeout_s=None, **kwargs):
        observation = await super().step_async(action, timeout_s=timeout_s, **kwargs)
        observation.done, observation.reward = self._solved, float(self._solved)
        return observation

    def _step_impl(self, action, timeout_s=None, **kwargs):
        return Observation(done=False, reward=0.0)

    @property
    def state(self):
        return self._state


def script(moves):
    """A policy playing ``moves`` in order: text, or ``(tool, arguments)`` as a function call."""

    def policy(request):
        items = request.input_items()
        turn = sum(1 for i in items if i.type == "function_call" or getattr(i, "role", None) == "assistant")
        move = moves[min(turn, len(moves) - 1)]
        return [function_call(move[0], move[1])] if isinstance(move, tuple) else move

    return policy


def played(lab, server, row, moves, agent="gymnasium_agent"):
    env = lab.servers[server.name] if server.name in lab.servers else lab.serve(server)
    model = lab.serve_model(script(moves), name="script")
    runner = lab.serve_agent(agent, resources=env, model=model, name="agent", max_steps=len(moves))
    record = runner.run(row)
    for name in ("agent", "script"):
        lab.servers[name].stop()
    return record


@contextlib.contextmanager
def served(app):
    """An ASGI app on uvicorn, 127.0.0.1, a port of its own."""
    server = ThreadedServer(app, name="openenv").start()
    try:
        yield server.url
    finally:
        server.stop()


def test_the_openenv_init_scaffold_played_by_gymnasium_agent_equals_direct_use(lab, echo):
    environment, action = echo
    server, rows = envs.openenv(environment, seeds=[0, 1])
    assert server.text_field == "message"
    assert "message" in rows[0]["responses_create_params"]["input"][0]["content"]
    record = played(lab, server, rows[0], MESSAGES)
    assert not record.mask_sample, record.failure_reason
    direct = environment()
    direct.reset()
    reference = [direct.step(action(message=m)) for m in MESSAGES]
    assert [s.reward for s in record.steps] == [o.reward for o in reference]
    assert [s.terminated for s in record.steps] == [o.done for o in reference]
    assert record.steps[-1].truncated  # the echo never ends: the agent's step limit cut it
    assert [s.observation for s in record.steps][1] == '{"echoed_message": "a longer message", "message_length": 16}'
    assert server.session_state == {}


def test_an_openenv_environment_with_a_tool_equals_direct_use(lab):
    server, rows = envs.openenv(GuessEnv, seeds=[3, 8])
    tools = rows[0]["responses_create_params"]["tools"]
    assert [t["name"] for t in tools] == ["guess"] and tools[0]["parameters"]["required"] == ["n"]
    for row in rows:
        moves = [("guess", {"n": n}) for n in (5, 9, 2, 4, 1, 9)]
        record = played(lab, server, row, moves)
        assert not record.mask_sample, record.failure_reason

        async def direct(row=row, moves=moves):
            env = GuessEnv()
            env.reset(seed=row["seed"])
            out = []
            for _, arguments in moves:
                observation = await env.step_async(CallToolAction(tool_name="guess", arguments=arguments))
                out.append((observation.reward, observation.done, observation.result.data))
                if observation.done:
                    break
            return out

        reference = asyncio.run(direct())
        served_steps = [(s.reward, s.terminated, s.observation) for s in record.steps]
        if not reference[-1][1]:  # never solved: the step limit truncated the last step
            assert record.steps[-1].truncated
        assert served_steps == reference
    assert server.session_state == {}


def test_a_running_openenv_server_reached_with_its_own_client(lab, echo):
    """OpenEnv's own server (create_app on uvicorn), one GenericEnvClient session per episode."""
    from openenv.core.env_server.http_server import create_app

    environment, action = echo
    app = create_app(environment, action, type(environment().reset()), env_name="echo", max_concurrent_envs=4)
    with served(app) as url:
        server, rows = envs.openenv(url, seeds=[0], name="echo-remote")
        assert server.text_field == "message"
        record = played(lab, server, rows[0], MESSAGES)
        assert not record.mask_sample, record.failure_reason
        direct = environment()
        direct.reset()
        assert [s.reward for s in record.steps] == [direct.step(action(message=m)).reward for m in MESSAGES]
        assert server.session_state == {}
        configured = lab.serve(builtin_class("resources_servers", "openenv"), name="echo-config", url=url)
        again = played(lab, configured.server, rows[0], MESSAGES)  # what a YAML config with `url:` serves
        assert [s.reward for s in again.steps] == [s.reward for s in record.steps]


def test_unreadable_and_hostile_actions_change_nothing(lab):
    server, rows = envs.openenv(GuessEnv, seeds=[3])
    moves = [
        ("guess", {"n": "not a number"}),  # the tool refuses: its error is the observation, nothing solved
        ("nope", {}),  # not a tool of this environment
        "plain text is no tool call",
        "[" * 50_000 + "]" * 50_000,  # JSON nested past the reader: unreadable, not a server error
        ("guess", {"n": 4}),
    ]
    record = played(lab, server, rows[0], moves)
    assert not record.mask_sample, record.failure_reason
    assert [s.reward for s in record.steps] == [0.0, 0.0, 0.0, 0.0, 1.0]
    assert record.steps[0].observation.startswith("error:")
    assert all("unreadable_action" in s.info for s in record.steps[1:4])
    assert record.steps[-1].terminated
    assert server.session_state == {}


def test_a_bad_seed_is_a_4xx_naming_the_server(lab, echo):
    server, rows = envs.openenv(echo[0], seeds=[0])
    env = lab.serve(server)
    from gymlab.errors import ServerError

    with pytest.raises(ServerError) as caught:
        env.post("/reset", {**rows[0], "seed": -3})
    assert caught.value.status == 422 and server.name in str(caught.value)
    assert server.session_state == {}


def test_concurrent_episodes_each_get_their_own_environment(lab):
    server, rows = envs.openenv(GuessEnv, seeds=range(8))
    env = lab.serve(server)
    model = lab.serve_model(script([("guess", {"n": n}) for n in range(1, 11)]), name="sweep")
    agent = lab.serve_agent("gymnasium_agent", resources=env, model=model, name="agent", max_steps=10)
    rollouts = lab.run_many(agent, rows, concurrency=8)
    for record, row in zip(rollouts, rows, strict=True):
        assert record.reward == 1.0 and len(record.steps) == 1 + row["seed"] % 10
    assert server.session_state == {}


def test_the_counter_and_blackjack_driven_by_openenv_generic_client_equal_gymlab_agents(lab):
    """gymlab's environments under OpenEnv's own server, driven by GenericEnvClient: the same rewards as
    gymlab's simple_agent (seed/verify with a tool) and gymnasium_agent (Gymnasium) on the same moves."""
    counter = lab.serve(load_environment("counter").CounterServer, name="counter")
    blackjack = lab.serve(load_environment("blackjack").BlackjackEnv, name="blackjack")
    counter_rows, blackjack_rows = example_rows("counter")[:2], example_rows("blackjack")[:3]
    plays = {
        "counter": [
            [("increment", {"by": 1})] * 3 + ["done"],  # reaches 3: reward 1
            [("increment", {"by": 2}), ("increment", {"by": 2}), "done"],  # overshoots: reward 0
        ],
        "blackjack": [["hit", "stand"], ["stand"], ["hit", "hit", "hit", "stand"]],
    }

    async def drive(url, row_moves):
        out = []
        for task, moves in enumerate(row_moves):
            async with GenericEnvClient(base_url=url) as client:
                result = await client.reset(task=task)
                assert result.observation["text"]
                rewards = []
                for move in moves:
                    action = {"tool": move[0], "arguments": move[1]} if isinstance(move, tuple) else {"message": move}
                    result = await client.step(action)
                    rewards.append(result.reward)
                    if result.done:
                        break
                out.append((rewards, result.done))
        return out

    for handle, rows, agent in (
        (counter, counter_rows, "simple_agent"),
        (blackjack, blackjack_rows, "gymnasium_agent"),
    ):
        target = handle.url if handle.name == "blackjack" else handle  # a URL: its protocol read from /openapi.json
        with served(openenv_app(target, rows, max_concurrent_envs=4)) as url:
            driven = asyncio.run(drive(url, plays[handle.name]))
        if handle.name == "counter":
            assert driven == [([0.0, 0.0, 0.0, 1.0], True), ([0.0, 0.0, 0.0], True)]
        for (rewards, done), row, moves in zip(driven, rows, plays[handle.name], strict=True):
            record = played(lab, handle.server, row, moves, agent=agent)
            assert not record.mask_sample, record.failure_reason
            if agent == "simple_agent":
                assert rewards[-1] == record.reward and done
                assert rewards[:-1] == [0.0] * (len(rewards) - 1)
            else:
                assert rewards == [s.reward for s in record.steps]
                assert done == (record.steps[-1].terminated or record.steps[-1].truncated)
        assert handle.server.session_state == {}


class Flaky(GuessEnv):
    """Raises on a guess of 0; never answers a guess of 99 (until ``release`` is set)."""

    release = threading.Event()

    async def step_async(self, action, timeout_s=None, **kwargs):
        n = action.arguments.get("n") if isinstance(action, CallToolAction) else None
        if n == 0:
            raise RuntimeError("the environment's own bug")
        if n == 99:
            await asyncio.to_thread(self.release.wait)
        return await super().step_async(action, timeout_s=timeout_s, **kwargs)


def test_an_environment_that_fails_or_hangs_is_masked_and_released(lab):
    server, rows = envs.openenv(Flaky, seeds=[3])
    server.timeout_s = 3.0
    try:
        for n, kind in ((0, "verifier_error"), (99, "transport_timeout")):
            record = played(lab, server, rows[0], [("guess", {"n": n})])
            assert record.mask_sample and record.failure_kind == kind, (record.failure_kind, record.failure_reason)
            assert server.name in record.failure_reason
            assert server.session_state == {}
    finally:
        Flaky.release.set()


def test_a_running_openenv_server_killed_midway_is_masked(lab, echo):
    from openenv.core.env_server.http_server import create_app

    from gymlab._http.client import Cookies
    from gymlab._sync import run_sync

    environment, action = echo
    app = create_app(environment, action, type(environment().reset()), env_name="echo", max_concurrent_envs=2)
    openenv_server = ThreadedServer(app, name="openenv").start()
    server, rows = envs.openenv(openenv_server.url, seeds=[0], name="echo-remote")
    server.timeout_s = 5.0
    env = lab.serve(server)
    cookies = Cookies()
    run_sync(lab.client.post_ok(env.url, "/reset", rows[0], cookies))
    openenv_server.stop()
    step = {**rows[0], "response": {"output": [{"type": "message", "role": "assistant", "content": "hi"}]}}
    answer = run_sync(lab.client.post_ok(env.url, "/step", step, cookies))
    assert answer["mask_sample"] and answer["truncated"]
    assert answer["failure_kind"] in ("transport_peer_drop", "transport_timeout"), answer
    assert server.session_state == {}


def test_foreign_and_hostile_openenv_clients_get_errors_and_lose_nothing(lab):
    """GenericEnvClient sending what no action is, a step before any reset, an undeclared tool, a huge
    message, and a client that hangs up mid-episode (its episode is released on the gymlab server)."""
    counter = lab.serve(load_environment("counter").CounterServer, name="counter")
    rows = example_rows("counter")[:1]

    async def hostile(url):
        async with GenericEnvClient(base_url=url) as client:
            with pytest.raises(RuntimeError, match="reset first"):
                await client.step({"message": "early"})
            await client.reset(task=0)
            for junk in ({"bogus": 1}, {"message": "x" * 1_000_001}, {"tool": "increment", "arguments": "nope"}):
                with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
                    await client.step(junk)
            refused = await client.step({"tool": "explode", "arguments": {}})
            assert "error" in refused.observation["text"] and refused.reward == 0.0
            with pytest.raises(RuntimeError, match="task must be a row index"):
                await client.reset(task=7)
            await client.reset(task=0)
            await client.step({"tool": "increment", "arguments": {"by": 1}})
        # the client hung up mid-episode: OpenEnv closes its environment, which releases gymlab's episode

    with served(openenv_app(counter, rows, max_concurrent_envs=2)) as url:
        asyncio.run(hostile(url))
        wait_until(lambda: counter.server.session_state == {}, what="the abandoned episode released")
    with pytest.raises(RuntimeError, match="/schema answered 404"):  # not an OpenEnv server
        envs.openenv(counter.url)
    with pytest.raises(ValueError, match="neither /step nor /verify"):
        openenv_app(lab.serve_model(script(["hi"]), name="not-an-env").url, rows)


def test_probes_and_the_profile_run_on_an_openenv_environment(lab):
    """gymlab's probes (on gymnasium_agent) and the reward profile, as on any other environment: no
    non-answer earns the guessing game's reward; the sweep always solves it (flagged too easy)."""
    from gymlab.probes import probe

    server, rows = envs.openenv(GuessEnv, seeds=range(4))
    env = lab.serve(server)
    sweep = script([("guess", {"n": n}) for n in range(1, 11)])
    report = probe(
        lab,
        env,
        rows,
        probes=["empty_answer", "echo_prompt", "call_every_tool", "repeat_tool_call", "tool_leak"],
        real_policy=sweep,
        max_steps=10,
    )
    assert report.flagged == []
    assert set(report.frame["real_reward"]) == {1.0}
    agent = lab.serve_agent("gymnasium_agent", resources=env, model=lab.serve_model(sweep, name="sweep"), max_steps=10)
    profile = lab.run_many(agent, rows, repeats=2).profile()
    summary = profile.summary
    assert summary["episodes"] == 8 and summary["mean_reward"] == 1.0 and summary["always_1"] == [0, 1, 2, 3]
    assert server.session_state == {}


class Word(Action):
    word: str


class Picky(Environment):
    """Pays 1 a word; its own bug: the word "boom" makes it raise."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def reset(self, seed=None, episode_id=None, **kwargs):
        self._state = State(step_count=0)
        return Observation(reward=0.0)

    def step(self, action: Word, timeout_s=None, **kwargs):
        if action.word == "boom":
            raise RuntimeError("the environment's own bug")
        self._state.step_count += 1
        return Observation(reward=1.0, done=self._state.step_count >= 2)

    @property
    def state(self):
        return self._state


def test_a_running_server_whose_environment_raises_is_a_masked_verifier_error(lab):
    from openenv.core.env_server.http_server import create_app

    with served(create_app(Picky, Word, Observation, env_name="picky", max_concurrent_envs=2)) as url:
        server, rows = envs.openenv(url, seeds=[0], name="picky")
        assert server.text_field == "word"
        assert [s.reward for s in played(lab, server, rows[0], ["yes", "no"]).steps] == [1.0, 1.0]
        record = played(lab, server, rows[0], ["yes", "boom"])
        assert record.mask_sample and record.failure_kind == "verifier_error", record.failure_reason
        assert "own bug" in record.failure_reason and server.session_state == {}
