"""Reward probes find rewards a model can earn without the task, through the same agent path as any run."""

from __future__ import annotations

import asyncio
import json
import math
import re

import pytest
from fastapi import FastAPI
from pydantic import BaseModel

from gymlab import BaseVerifyRequest, BaseVerifyResponse, EpisodeViewer, ProbeReport, Rollouts, SimpleResourcesServer
from gymlab.probes import BUILTIN_PROBES, probe
from gymlab.probes.policies import run_names
from gymlab.protocol import function_call

QUESTIONS = [
    {"responses_create_params": {"input": [{"role": "user", "content": "What is 6 times 7?"}]}},
    {"responses_create_params": {"input": [{"role": "user", "content": "What is 40 plus 2?"}]}},
]


class FortyTwoInText(SimpleResourcesServer):
    """The hackable verify: reward when "42" appears anywhere in the answer."""

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        return BaseVerifyResponse(**body.model_dump(), reward=float("42" in body.response.output_text))


class FortyTwoOnly(SimpleResourcesServer):
    """The fixed verify: the answer's only number is 42."""

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        numbers = re.findall(r"-?\d+", body.response.output_text)
        return BaseVerifyResponse(**body.model_dump(), reward=float(numbers == ["42"]))


def answers_42(request):
    return "The answer is 42."


def test_answer_spray_flags_a_verify_that_checks_42_in_text(lab):
    env = lab.serve(FortyTwoInText)
    report = probe(lab, env, QUESTIONS, real_policy=answers_42)
    assert isinstance(report, ProbeReport) and list(report.rollouts) == run_names(BUILTIN_PROBES)
    assert "answer_spray" in report.flagged
    # nothing else writes "42" (the answer-aware spray does: 6 x 7 and 40 + 2 are its guesses)
    assert set(report.flagged) == {"answer_spray", "answer_aware_spray"}
    spray = report.cell("answer_spray", 0)
    assert spray.mean_reward == 1.0 and spray.beat_rate == 1.0 and spray.real_reward == 1.0 and spray.above
    assert report.cell("refusal").mean_reward == 0.0 and not report.cell("refusal").above
    # the episodes behind the flag: the spray's own answer, graded 1.0
    (episode,) = report.episodes("answer_spray", 1)
    assert episode.reward == 1.0 and " 41 42 43 " in episode.response.output_text
    assert isinstance(report.episodes("answer_spray"), Rollouts) and len(report.episodes("answer_spray")) == 2

    fixed = probe(lab, lab.serve(FortyTwoOnly), QUESTIONS, real_policy=answers_42)
    assert fixed.flagged == [] and fixed.hits == []
    assert fixed.cell("answer_spray").mean_reward == 0.0 and fixed.cell("answer_spray").real_reward == 1.0


class LookupRequest(BaseModel):
    query: str
    limit: int


class ToolCalledServer(SimpleResourcesServer):
    """The hackable verify: reward when any tool was called, whatever it was called with."""

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        app.post("/lookup")(self.lookup)
        return app

    async def lookup(self, body: LookupRequest) -> dict:
        return {"hits": [f"{body.query}:{i}" for i in range(min(body.limit, 2))]}

    async def verify(self, body: BaseVerifyRequest) -> BaseVerifyResponse:
        called = any(item.type == "function_call" for item in body.response.output)
        return BaseVerifyResponse(**body.model_dump(), reward=float(called))


LOOKUP_TOOL = {
    "type": "function",
    "name": "lookup",
    "description": "Search the catalogue.",
    "parameters": {
        "type": "object",
        "properties": {"query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 5}},
        "required": ["query", "limit"],
        "additionalProperties": False,
    },
    "strict": True,
}


def _tool_rows(n: int) -> list[dict]:
    return [
        {"responses_create_params": {"input": f"Find the catalogue number of item {i}.", "tools": [LOOKUP_TOOL]}}
        for i in range(n)
    ]


def test_tool_calling_probe_flags_a_verify_that_checks_only_that_a_tool_was_called(lab):
    env = lab.serve(ToolCalledServer)
    report = probe(lab, env, _tool_rows(3), max_steps=4)
    tool_probes = ("call_every_tool", "call_every_tool_silent", "call_every_tool_random", "call_every_tool_then_spray")
    for name in (*tool_probes, "repeat_tool_call"):
        assert name in report.flagged and report.cell(name).mean_reward == 1.0
    for name in ("empty_answer", "echo_prompt", "answer_spray", "answer_aware_spray", "long_answer", "refusal"):
        assert name not in report.flagged and report.cell(name).mean_reward == 0.0
    # schema-valid arguments: every call reached the tool and got its answer, not a validation error
    calls = report.episodes("call_every_tool_random").calls
    assert len(calls) == 3 and all("hits" in json.loads(out) for out in calls["output"])
    assert all(1 <= json.loads(a)["limit"] <= 5 for a in calls["arguments"])
    # with and without a final answer
    (said,) = report.episodes("call_every_tool", 0)
    (silent,) = report.episodes("call_every_tool_silent", 0)
    assert said.response.output_text and said.terminated
    assert silent.response.output_text == "" and silent.response.status == "incomplete"


def test_probes_run_the_agent_path_step_limit_tool_guard_and_masking(lab, counter, rows):
    """A looping probe is cut by max_steps, a reserved tool is refused, a silent or broken model is masked."""
    env = lab.serve(counter.CounterServer)

    def call_verify(request):
        """Try to grade itself through the reserved /verify route, then answer."""
        if any(i.type == "function_call_output" for i in request.input_items()):
            return "done"
        return [function_call("verify", {"reward": 1.0})]

    async def silent(request):
        """Never answer."""
        await asyncio.Event().wait()

    def broken(request):
        """Crash."""
        raise RuntimeError("this probe is broken")

    probes = {
        "repeat_tool_call": BUILTIN_PROBES["repeat_tool_call"],
        "call_verify": call_verify,
        "silent": silent,
        "broken": broken,
    }
    report = probe(lab, env, rows("counter")[:2], probes=probes, max_steps=3, timeouts={"model": 0.5})

    for episode in report.episodes("repeat_tool_call"):  # looped until the step limit
        assert len(episode.steps) == 3 and episode.truncated and not episode.terminated
        assert episode.response.status == "incomplete" and episode.response.incomplete_details == {
            "reason": "max_steps"
        }
    for episode in report.episodes("call_verify"):  # the tool guard refused the reserved route
        assert episode.steps[0].tool_errors == 1
        assert "not callable" in json.loads(episode.steps[0].tool_outputs[0].output)["error"]
        assert episode.reward == 0.0 and not episode.mask_sample
    silent_eps = report.episodes("silent")
    assert [(e.mask_sample, e.failure_kind, e.failure_stage) for e in silent_eps] == [
        (True, "transport_timeout", "agent")
    ] * 2
    assert [(e.mask_sample, e.failure_kind) for e in report.episodes("broken")] == [(True, "provider_unavailable")] * 2
    # a masked episode is no reward: the cell counts it, its mean is nan, and a probe masked more
    # often than the real policy (none, without a real run) is flagged: its verdict is unknown
    cell = report.cell("silent", 0)
    assert cell.masked == 1 and cell.mask_rate == 1.0 and math.isnan(cell.mean_reward) and not cell.above
    assert report.flagged == ["silent", "broken"] and cell.masked_more
    assert "100% of its episodes were masked (transport_timeout 2)" in report.reasons()["silent"]
    assert env.server.session_state == {}  # every seeded session was released, as in any run
    # the probe's servers are gone; the environment stays
    assert [n for n in lab.servers if n.startswith("probe-")] == []


def test_verdict_table_html_text_frame_and_viewer(lab):
    env = lab.serve(FortyTwoInText)
    report = probe(lab, env, QUESTIONS, probes=["answer_spray", "refusal"], real_policy=answers_42, threshold=0.5)
    html = report._repr_html_()
    assert "real policy" in html and "gl-flag" in html and "answer_spray ⚑" in html
    assert "<details><summary>episode</summary>" in html and "What is 6 times 7?" in html
    assert "refusal ⚑" not in html
    text = repr(report)
    assert "real policy" in text and "1.00!" in text and "answer_spray *" in text and "refusal *" not in text
    assert "answer_spray: it earned a mean reward of 1.00 (above 0.5)." in text
    assert "Shortcuts tried: a spray of common answers (answer_spray); no answer (refusal)." in text
    frame = report.frame
    assert list(frame.columns) == [
        *("probe", "task", "episodes", "masked", "mask_rate", "mean_reward", "beat_rate", "real_reward"),
        *("real_mask_rate", "above", "masked_more", "by_chance", "flagged", "shortcut", "prompt"),
    ]
    assert frame.set_index(["probe", "task"]).loc[("answer_spray", 1), "flagged"]
    assert not frame.set_index(["probe", "task"]).loc[("refusal", 0), "above"]
    assert (frame["real_reward"] == 1.0).all() and frame["prompt"].iloc[0] == "What is 6 times 7?"
    viewer = report.viewer("answer_spray", 0)
    assert isinstance(viewer, EpisodeViewer) and viewer.record.reward == 1.0
    assert report.episodes("real policy", 0)[0].response.output_text == "The answer is 42."


def test_bad_arguments_name_what_to_do(lab):
    env = lab.serve(FortyTwoInText)
    with pytest.raises(ValueError, match="unknown probe 'nope'; built-in probes: empty_answer"):
        probe(lab, env, QUESTIONS, probes=["nope"])
    with pytest.raises(TypeError, match="a probe is a policy function"):
        probe(lab, env, QUESTIONS, probes={"x": 3})
    with pytest.raises(ValueError, match="at least one row"):
        probe(lab, env, [])
    report = probe(lab, env, QUESTIONS, probes=["refusal"])
    with pytest.raises(KeyError, match="no probe 'other' in this report; probes: refusal"):
        report.episodes("other")
    with pytest.raises(KeyError, match="no real-policy run"):
        report.episodes("real policy")


def test_gymnasium_environment_probed_with_a_real_model_server(lab):
    """A Gymnasium server runs on gymnasium_agent; the real policy may be a model server handle; a
    flagged cell's transcript shows the observations the model answered."""
    from gymlab.examples import example_rows, load_environment

    qa = load_environment("qa")

    class LooseQA(qa.QAEnv):
        def correct(self, answer, expected):  # the shipped check loosened: the expected word anywhere pays
            return expected.lower() in answer.lower()

    env = lab.serve(LooseQA)
    real = lab.serve_model(qa.policy, name="qa-policy")
    report = probe(lab, env, example_rows("qa"), real_policy=real, probes=["echo_prompt", "refusal"])
    assert report.flagged == ["echo_prompt"] and report.hits == [("echo_prompt", 0)]
    assert report.cell("refusal").real_reward == 1.0
    (episode,) = report.episodes("echo_prompt", 0)
    assert episode.agent == "probe-echo_prompt-agent" and len(episode.steps) == 2 and episode.terminated
    assert "<td>observation</td><td>Whose company designed and built it? Give the surname.</td>" in (
        report._repr_html_()
    )
    assert "qa-policy" in lab.servers  # a model server passed in is the caller's: it keeps running
