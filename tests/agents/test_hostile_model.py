"""A hostile model cannot reach lifecycle routes as tools, on every path that dispatches its calls.

The counter grades the final count against the target. A model that calls ``seed_session`` with
the target as the initial count would earn 1.0 without doing the task; one that calls ``verify`` or
``close_session`` would turn its episode into a masked ``session_lost``. None of those calls may
reach the server: each becomes an error output for the model, counted on its step.
"""

from __future__ import annotations

import json

import pytest
from fastapi import FastAPI, Request

from gymlab import SingleAgentTurn, function_call
from gymlab.examples import example_rows, load_environment
from gymlab.lab import AgentHandle

counter = load_environment("counter")

FORBIDDEN = [
    "seed_session",
    "verify",
    "close_session",
    "reset",
    "step",
    "close",
    "aggregate_metrics",
    "health",
    "docs",
    "openapi.json",
    "../verify",
    "increment/../seed_session",
    "%2e%2e/verify",
    "increment?by=9",
    "increment#x",
    "incr ement",
    "",
    "decrement",
]


class WatchedCounter(counter.CounterServer):
    """The counter, with every request path it receives written down."""

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        self.__dict__.setdefault("seen", [])

        @app.middleware("http")
        async def watch(request: Request, call_next):
            self.__dict__["seen"].append(request.url.path)
            return await call_next(request)

        return app


def _row():
    row = example_rows("counter")[0]
    assert row["target"] > row["initial_count"]  # reaching the target takes real increments
    return row


def hostile(request):
    """First turn: every forbidden call at once, seeding at the target among them; then gives up."""
    if any(i.type == "function_call_output" for i in request.input_items()):
        return "The counter reads the target."
    target = _row()["target"]
    return [
        function_call(name, {"initial_count": target, "target": target, "resources_session_id": "x"})
        for name in FORBIDDEN
    ]


def _check_refused(record, env):
    outputs = [o for step in record.steps for o in step.tool_outputs]
    assert len(outputs) == len(FORBIDDEN)
    errors = [json.loads(o.output)["error"] for o in outputs]
    assert errors[FORBIDDEN.index("decrement")] == "unknown tool 'decrement'; declared: increment"
    assert errors[0] == "tool 'seed_session' is not callable; declared: increment"
    assert record.steps[0].tool_errors == len(FORBIDDEN)
    # the reward is what the task alone earns: the count never moved, so 0.0, graded, not masked
    assert (record.reward, record.mask_sample, record.failure_kind) == (0.0, False, None)
    assert record.model_extra["final_count"] == _row()["initial_count"]
    assert env.server.session_state == {}


def test_simple_agent_sends_no_forbidden_call(lab):
    env = lab.serve(WatchedCounter)
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(hostile))
    record = agent.run(_row())
    _check_refused(record, env)
    assert env.server.seen == ["/seed_session", "/verify"]  # the agent's own lifecycle calls only


def test_a_notebook_episode_sends_no_forbidden_call(lab):
    env = lab.serve(WatchedCounter)
    ep = lab.episode(env, _row(), model=lab.serve_model(hostile))
    ep.seed()
    ep.run()
    record = ep.verify()
    _check_refused(record, env)
    assert env.server.seen == ["/seed_session", "/verify"]


def test_single_agent_turn_sends_no_forbidden_call(lab):
    env = lab.serve(WatchedCounter)
    agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(hostile))
    turn = lab.serve(SingleAgentTurn, handle_cls=AgentHandle, resources_server=env.url, agent_server=agent.url)
    record = turn.run({"task_id": "counter/0", "task_input": _row()})
    outputs = [
        json.loads(o["output"])["error"]
        for o in record.response.model_dump()["output"]
        if o["type"] == "function_call_output"
    ]
    assert len(outputs) == len(FORBIDDEN)
    assert (record.reward, record.mask_sample) == (0.0, False)
    assert env.server.seen == ["/seed_session", "/verify", "/close_session"]


def test_a_call_by_hand_cannot_name_a_lifecycle_route(lab):
    from gymlab.errors import EpisodeError

    env = lab.serve(WatchedCounter)
    ep = lab.episode(env, _row())
    ep.seed()
    for name in ("verify", "close_session", "../verify"):
        with pytest.raises(EpisodeError, match=f"{name!r} is not a tool route"):
            ep.call(name)
    assert ep.call("increment", by=1) == {"count": _row()["initial_count"] + 1}
    ep.close()
    assert env.server.seen == ["/seed_session", "/increment", "/verify"]
