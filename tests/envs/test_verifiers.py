"""verifiers both ways: a taskset written with verifiers' own classes (a single-turn task with a weighted
rubric, a task with a toolset) served by gymlab.envs.verifiers grades as its rubric does; verifiers'
NeMo Gym taskset plays gymlab's rows against gymlab's servers with gymlab's rewards. The verifiers
extra cannot be installed beside the mcp extra (pyproject.toml), so this file runs only where it is."""

from __future__ import annotations

import asyncio
import json
import re
import sys

import pytest

vf = pytest.importorskip("verifiers.v1", reason="the verifiers extra is not installed here", exc_type=ImportError)

import openai  # noqa: E402
from verifiers.v1.dialects.responses import ResponsesDialect  # noqa: E402
from verifiers.v1.graph import MessageNode  # noqa: E402
from verifiers.v1.tasksets.nemo_gym import NeMoGymConfig, NeMoGymTaskConfig, NeMoGymTaskset  # noqa: E402
from verifiers.v1.tasksets.nemo_gym.toolset import NeMoGymState  # noqa: E402
from verifiers.v1.types import AssistantMessage, ToolCall, ToolMessage  # noqa: E402

from gymlab import envs, function_call  # noqa: E402
from gymlab.envs.verifiers_env import episode_trace  # noqa: E402
from gymlab.errors import ServerError  # noqa: E402
from gymlab.examples import example_rows, load_environment  # noqa: E402
from gymlab.jsonl import write_jsonl_atomic  # noqa: E402


class QAData(vf.TaskData):
    answer: str


class QATask(vf.Task[QAData]):
    """A single-turn task: 0.8 for the answer in the reply, 0.2 for a reply under 40 characters."""

    @vf.reward(weight=0.8)
    async def correct(self, trace: vf.Trace) -> float:
        return float(self.data.answer in (trace.last_reply or ""))

    @vf.reward(weight=0.2)
    async def brief(self, trace: vf.Trace) -> float:
        return float(len(trace.last_reply or "") < 40)


class QAConfig(vf.TasksetConfig):
    n: int = 4


class QATaskset(vf.Taskset[QATask, QAConfig]):
    def load(self):
        return [
            QATask(QAData(prompt=f"What is {a}+{a + 1}?", answer=str(2 * a + 1), system_prompt="Answer briefly."))
            for a in range(self.config.n)
        ]


class CalcToolset(vf.Toolset[vf.ToolsetConfig]):
    TOOL_PREFIX = None

    @vf.tool
    def multiply(self, a: int, b: int) -> int:
        """Multiply two integers."""
        if abs(a) > 10**6 or abs(b) > 10**6:
            raise ValueError("numbers up to a million only")
        return a * b


class CalcTaskConfig(vf.TaskConfig):
    tools: vf.ToolsetConfig = vf.ToolsetConfig()


class CalcTask(vf.Task[QAData, vf.State, CalcTaskConfig]):
    """A tool task: 1 for the product in the final reply."""

    @classmethod
    def toolsets(cls, config):
        return [CalcToolset(config.tools)]

    @vf.reward(weight=1.0)
    async def correct(self, trace: vf.Trace) -> float:
        return float(self.data.answer in (trace.last_reply or ""))


class CalcConfig(vf.TasksetConfig):
    task: CalcTaskConfig = CalcTaskConfig()


class CalcTaskset(vf.Taskset[CalcTask, CalcConfig]):
    def load(self):
        return [
            CalcTask(QAData(prompt=f"What is {a}*{a + 2}? Use the tool.", answer=str(a * (a + 2))), self.config.task)
            for a in (2, 3, 7)
        ]


def rubric(task, messages):
    """The task's own score on a trace written by hand with verifiers' types (the reference)."""
    trace = episode_trace(task, [])
    start = len(trace.nodes)
    for i, message in enumerate(messages):
        trace.nodes.append(
            MessageNode(parent=start + i - 1, message=message, sampled=isinstance(message, AssistantMessage))
        )
    asyncio.run(task.score(trace))
    return trace.reward


def test_a_single_turn_taskset_grades_as_its_rubric(lab):
    taskset = QATaskset(QAConfig())
    server, rows = envs.verifiers(taskset)
    assert rows[1]["responses_create_params"]["input"] == [
        {"role": "developer", "content": "Answer briefly."},
        {"role": "user", "content": "What is 1+2?"},
    ]
    env = lab.serve(server)
    completions = ["3", "The answer is 3, as one plus two is three, clearly.", "4", "x" * 5000, ""]
    tasks = list(taskset)
    for completion in completions:
        model = lab.serve_model(lambda request, c=completion: c or [], name="fixed")
        agent = lab.serve_agent("simple_agent", resources=env, model=model, name="agent")
        record = agent.run(rows[1])
        expected = rubric(tasks[1], [AssistantMessage(content=completion or None)])
        assert not record.mask_sample, record.failure_reason
        assert record.reward == pytest.approx(expected)
        for name in ("agent", "fixed"):
            lab.servers[name].stop()
    assert [rubric(tasks[1], [AssistantMessage(content=c)]) for c in ("3", "4")] == [1.0, 0.2]
    assert server.session_state == {}


def calc_policy(request):
    items = request.input_items()
    outputs = [i for i in items if i.type == "function_call_output"]
    if outputs:
        return f"It is {outputs[-1].output}."
    a, b = re.findall(r"\d+", [i.text for i in items if getattr(i, "role", None) == "user"][-1])[:2]
    return [function_call("multiply", {"a": int(a), "b": int(b)})]


def test_a_tool_taskset_serves_its_tools_as_routes_and_grades_as_its_rubric(lab):
    taskset = CalcTaskset(CalcConfig())
    server, rows = envs.verifiers(taskset, name="calc")
    tool = rows[0]["responses_create_params"]["tools"][0]
    assert tool["name"] == "multiply" and tool["parameters"]["required"] == ["a", "b"]
    env = lab.serve(server)
    model = lab.serve_model(calc_policy, name="calc-model")
    agent = lab.serve_agent("simple_agent", resources=env, model=model, name="agent")
    rollouts = lab.run_many(agent, rows)
    for record, task in zip(rollouts, list(taskset), strict=True):
        assert not record.mask_sample, record.failure_reason
        call, output = record.steps[0].action[0], record.steps[0].tool_outputs[0]
        messages = [
            AssistantMessage(tool_calls=[ToolCall(id=call.call_id, name=call.name, arguments=call.arguments)]),
            ToolMessage(tool_call_id=call.call_id, content=output.output),
            AssistantMessage(content=f"It is {output.output}."),
        ]
        assert record.reward == rubric(task, messages) == 1.0
    assert server.session_state == {}


def test_hostile_tool_calls_and_rows_get_4xx_and_lose_nothing(lab):
    server, rows = envs.verifiers(CalcTaskset(CalcConfig()), name="calc")
    env = lab.serve(server)
    from gymlab._http.client import Cookies

    cookies = Cookies()
    from gymlab._sync import run_sync

    def call(path, body):
        return run_sync(lab.client.post(env.url, path, body, cookies, "calc"))

    assert call("/multiply", {"a": 1, "b": 2}).status == 404  # no episode yet
    assert call("/seed_session", {**rows[0], "verifiers": {"index": 99}}).status == 422
    assert call("/seed_session", rows[0]).ok
    for body in ({"a": "x", "b": 2}, {"a": 1}, {"a": 10**9, "b": 1}, [1, 2], "nope"):
        reply = call("/multiply", body)
        assert reply.status == 422 and "calc" in reply.text, (body, reply.status, reply.text)
    assert call("/no_such_tool", {}).status == 422
    assert call("/multiply", {"a": 6, "b": 7}).text == "42"
    with pytest.raises(ServerError) as caught:
        env.post("/verify", {**rows[0], "verifiers": {"index": -1}, "response": {"output": []}})
    assert caught.value.status == 422
    assert call("/verify", {**rows[0], "response": {"output": []}}).json()["reward"] == 0.0
    assert server.session_state == {}


async def nemo_rollout(task, model_url: str, max_turns: int = 8):
    """One rollout of verifiers' NeMo Gym task: its own setup (/seed_session), the model over the Responses
    API with the official openai client, tool calls through the task's NeMo Gym state (the rollout's
    cookie), and its own scoring (/verify on trace_to_nemo_response); the trace comes back scored."""
    dialect = ResponsesDialect()
    params = task.data.row["responses_create_params"]
    trace = vf.Trace(
        task=vf.TraceTask(type=type(task).__name__, data=task.data),
        agent=vf.AgentInfo(config=vf.AgentConfig()),
        state=NeMoGymState(),
    )
    await task.setup(trace, None)
    for message in dialect.parse_request(params).messages:
        trace.nodes.append(MessageNode(parent=len(trace.nodes) - 1 if trace.nodes else None, message=message))
    conversation = list(params["input"])
    async with openai.AsyncOpenAI(base_url=model_url + "/v1", api_key="unused", max_retries=0) as client:
        for _ in range(max_turns):
            raw = await client.responses.create(model="policy", input=conversation, tools=params.get("tools") or [])
            reply = dialect.parse_response(dialect.validate_response(raw.model_dump(mode="json")))
            trace.nodes.append(MessageNode(parent=len(trace.nodes) - 1, message=reply.message, sampled=True))
            conversation += [item.model_dump(mode="json", exclude_none=True) for item in raw.output]
            if not reply.message.tool_calls:
                break
            for call in reply.message.tool_calls:
                answer = await trace.state.post(call.name, json.loads(call.arguments))
                tool = ToolMessage(tool_call_id=call.id, content=answer.text)
                trace.nodes.append(MessageNode(parent=len(trace.nodes) - 1, message=tool))
                conversation.append({"type": "function_call_output", "call_id": call.id, "output": answer.text})
    await task.score(trace)
    return trace


async def rollouts(taskset, model_url: str) -> list:
    return await asyncio.gather(*(nemo_rollout(task, model_url) for task in taskset))


def overshoot(request):
    """Increment by 5 once, then stop: past every target."""
    done = any(i.type == "function_call_output" for i in request.input_items())
    return "done" if done else [function_call("increment", {"by": 5})]


def test_a_verifiers_taskset_served_by_gymlab_plays_under_verifiers_nemo_gym_taskset(lab, tmp_path):
    """Both ways at once: the calculator taskset served by gymlab, its rows loaded by verifiers' NeMo Gym
    taskset and played (a small loop: the taskset's own setup, tool calls and scoring) with the rewards of
    gymlab's simple_agent; the counter's rows too, solved and overshot."""
    counter = lab.serve(load_environment("counter").CounterServer, name="counter")
    calc_server, calc_rows = envs.verifiers(CalcTaskset(CalcConfig()), name="calc")
    calc = lab.serve(calc_server)
    cases = [
        (calc, calc_rows, calc_policy, 1.0),
        (counter, example_rows("counter")[:2], overshoot, 0.0),
    ]
    for env, rows, play, reward in cases:
        model = lab.serve_model(play, name="model")
        path = tmp_path / f"{env.name}.jsonl"
        write_jsonl_atomic(path, rows)
        taskset = NeMoGymTaskset(
            NeMoGymConfig(dataset=path, task=NeMoGymTaskConfig(resources_url=env.url, request_timeout=30))
        )
        traces = asyncio.run(rollouts(taskset, model.url))
        agent = lab.serve_agent("simple_agent", resources=env, model=model, name="agent")
        records = lab.run_many(agent, rows)
        assert [t.reward for t in traces] == [r.reward for r in records]
        assert all(t.rewards["nemo_gym"].score in (0.0, 1.0) for t in traces)
        assert {t.reward for t in traces} == {reward}
        assert all(len(t.tool_messages) >= 1 for t in traces)
        for name in ("agent", "model"):
            lab.servers[name].stop()
        assert env.server.session_state == {}


def test_a_rubric_that_raises_is_masked_never_a_zero(lab):
    class Broken(QATask):
        @vf.reward(weight=1.0)
        async def correct(self, trace: vf.Trace) -> float:
            raise RuntimeError("the rubric's own bug")

    class BrokenTaskset(QATaskset):
        def load(self):
            return [Broken(t.data) for t in super().load()]

    server, rows = envs.verifiers(BrokenTaskset(QAConfig(n=1)))
    env = lab.serve(server)
    model = lab.serve_model(lambda request: "1", name="m")
    record = lab.serve_agent("simple_agent", resources=env, model=model, name="agent").run(rows[0])
    assert record.mask_sample and record.failure_kind == "verifier_error"
    assert "the rubric's own bug" in record.failure_reason


def test_probes_and_the_profile_run_on_a_verifiers_environment(lab):
    """gymlab's probes find what the rubric pays for nothing: its 0.2 for brevity pays every short
    non-answer, and echoing "What is 0+1?" contains the answer 1; the profile reads its components."""
    from gymlab.probes import probe

    server, rows = envs.verifiers(QATaskset(QAConfig()))
    env = lab.serve(server)

    def solver(request):
        a, b = re.findall(r"\d+", [i.text for i in request.input_items() if getattr(i, "role", None) == "user"][-1])
        return str(int(a) + int(b))

    report = probe(lab, env, rows, probes=["empty_answer", "echo_prompt", "refusal", "long_answer"], real_policy=solver)
    assert set(report.flagged) == {"empty_answer", "echo_prompt", "refusal", "long_answer"}
    assert report.cell("echo_prompt", 0).mean_reward == 1.0 and report.cell("empty_answer", 2).mean_reward == 0.2
    assert report.cell("long_answer", 0).mean_reward == 0.8 and report.cell("long_answer", 2).mean_reward == 0.0
    assert set(report.frame["real_reward"]) == {1.0}
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(solver, name="solver"))
    profile = lab.run_many(agent, rows, repeats=2).profile()
    summary = profile.summary
    assert summary["mean_reward"] == 1.0 and summary["components"] == {"correct": 0.8, "brief": 0.2}
    assert server.session_state == {}


class InProcessConfig(vf.HarnessConfig):
    pass


class InProcess(vf.Harness[InProcessConfig]):
    """A harness that runs its chat loop in this process (the built-in ones run a PEP 723 program that
    `uv` installs at run time): the model through verifiers' interception endpoint with the official
    openai client (Responses API), the tools through the rollout's MCP servers."""

    APPENDS_SYSTEM_PROMPT = True
    SUPPORTS_MCP = True
    EXECUTES_CODE = False
    NEEDS_CONTAINER = False

    async def setup(self, runtime):
        return None

    async def launch(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url=None):
        from gymlab.resources.mcp_backed import open_mcp

        system, prompt = self.resolve_prompt(data)
        messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt or []
        conversation = [{"role": "system", "content": system}] if system else []
        conversation += [m if isinstance(m, dict) else {"role": m.role, "content": m.content} for m in messages]
        async with (
            openai.AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0) as client,
            open_mcp(mcp_urls[""]) as mcp,
        ):
            listed = (await mcp.list_tools()).tools
            tools = [
                {"type": "function", "name": t.name, "description": t.description or "", "parameters": t.input_schema}
                for t in listed
            ]
            for _ in range(8):
                answer = await client.responses.create(model=ctx.model, input=conversation, tools=tools)
                conversation += [item.model_dump(mode="json", exclude_none=True) for item in answer.output]
                calls = [item for item in answer.output if item.type == "function_call"]
                if not calls:
                    break
                for call in calls:
                    result = await mcp.call_tool(call.name, json.loads(call.arguments))
                    text = "\n".join(b.text for b in result.content if getattr(b, "text", None) is not None)
                    conversation.append({"type": "function_call_output", "call_id": call.call_id, "output": text})
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")


def counter_or_give_up(request):
    """The counter's own policy, except that it gives up at once on a counter that starts at 5 or more."""
    text = " ".join(i.text for i in request.input_items() if i.type == "message" and i.role == "user")
    if int(re.findall(r"\d+", text)[0]) >= 5:
        return "I give up."
    return load_environment("counter").policy(request)


def test_verifiers_own_env_runner_plays_gymlab_rows_with_gymlab_rewards(lab, tmp_path, monkeypatch):
    """verifiers' NeMoGymEnv (its serving: the shared NeMo Gym tool server over MCP in a subprocess, the
    interception endpoint; its run_slot, its scoring) over gymlab's counter rows, unchanged."""
    from verifiers.v1.clients import ModelContext
    from verifiers.v1.env import RunSlot
    from verifiers.v1.envs.single_agent import SingleAgentEnvConfig
    from verifiers.v1.tasksets.nemo_gym import NeMoGymEnv

    harness = type(sys)("gymlab_in_process_harness")
    harness.InProcess, harness.__all__ = InProcess, ["InProcess"]
    monkeypatch.setitem(sys.modules, harness.__name__, harness)
    monkeypatch.setenv("GYMLAB_POLICY_KEY", "unused")
    counter = lab.serve(load_environment("counter").CounterServer, name="counter")
    model = lab.serve_model(counter_or_give_up, name="model")
    rows = example_rows("counter")[:4]
    write_jsonl_atomic(tmp_path / "rows.jsonl", rows)
    client = vf.EvalClientConfig(base_url=model.url + "/v1", api_key_var="GYMLAB_POLICY_KEY")
    config = SingleAgentEnvConfig(
        taskset=NeMoGymConfig(
            id="nemo_gym", dataset=tmp_path / "rows.jsonl", task=NeMoGymTaskConfig(resources_url=counter.url)
        ),
        agent=vf.AgentConfig(
            harness=InProcessConfig(id=harness.__name__), runtime=vf.SubprocessConfig(), client=client, model="policy"
        ),
    )
    env = NeMoGymEnv(config)

    async def run():
        context = ModelContext(client=client, model="policy", sampling=vf.SamplingConfig())
        async with env.serving():
            return await asyncio.gather(*(env.run_slot(RunSlot(task=task), context) for task in env.taskset))

    episodes = asyncio.run(run())
    traces = [episode.traces[0] for episode in episodes]
    assert [t.errors for t in traces] == [[]] * 4
    agent = lab.serve_agent("simple_agent", resources=counter, model=model, name="agent")
    assert [t.reward for t in traces] == [r.reward for r in lab.run_many(agent, rows)] == [1.0, 0.0, 1.0, 0.0]
    assert [len(t.tool_messages) for t in traces] == [3, 0, 3, 0]  # every increment went through the tool server
    assert counter.server.session_state == {}


def test_gymlab_envs_writes_a_tasksets_rows(tmp_path, monkeypatch):
    """`gymlab envs verifiers module:taskset --rows OUT`: the rows of a taskset a module defines."""
    import argparse

    from gymlab.cli.envs import main
    from gymlab.errors import ConfigError

    (tmp_path / "my_tasks.py").write_text(
        "import verifiers.v1 as vf\n\n"
        "class T(vf.Task[vf.TaskData]):\n"
        "    @vf.reward(weight=1.0)\n"
        "    async def r(self, trace: vf.Trace) -> float:\n"
        "        return 1.0\n\n"
        "class S(vf.Taskset[T, vf.TasksetConfig]):\n"
        "    def load(self):\n"
        "        return [T(vf.TaskData(prompt=f'say {i}')) for i in range(3)]\n\n"
        "TASKS = S(vf.TasksetConfig())\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "rows.jsonl"
    args = argparse.Namespace(
        adapter="verifiers", name="my_tasks:TASKS", rows=str(out), set=[], probe=False, json=False
    )
    assert main(args) == 0
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["responses_create_params"]["input"][-1]["content"] for r in rows] == ["say 0", "say 1", "say 2"]
    with pytest.raises(ConfigError, match="cannot be imported"):
        main(argparse.Namespace(**{**vars(args), "name": "my_tasks:NOPE"}))
