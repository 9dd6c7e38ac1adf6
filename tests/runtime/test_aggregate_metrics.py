"""``/aggregate_metrics`` under odd and oversized input, over real loopback servers: every odd verify
answer is a 422 naming its field (``verify_responses[3].reward``) or metrics that are finite JSON,
never a 500; a body past ``max_metrics_body_bytes`` is a 413 naming the setting; an agent's route
(its own default, or its resources server's answer) refuses the same way."""

from __future__ import annotations

import math

import httpx
import pytest

from gymlab.examples import load_environment

OK = {"reward": 1.0, "_ng_task_index": 0}

#: (name, verify_responses or raw JSON text, the field a 422 names, or None: answered 200)
ODD = [
    ("null reward", [OK, {"reward": None}], "verify_responses[1].reward"),
    ("numeric string reward", [{"reward": "1.0"}], "verify_responses[0].reward"),
    ("word reward", [OK, OK, OK, {"reward": "high"}], "verify_responses[3].reward"),
    ("boolean reward", [{"reward": True}], "verify_responses[0].reward"),
    ("list reward", [{"reward": [1.0]}], "verify_responses[0].reward"),
    ("object reward", [{"reward": {"value": 1.0}}], "verify_responses[0].reward"),
    ("int past the float range", [{"reward": 10**400}], "verify_responses[0].reward"),
    ("1e309 literal", '{"verify_responses": [{"reward": 1.0}, {"reward": 1e309}]}', "verify_responses[1].reward"),
    ("list task index", [{"reward": 1.0, "_ng_task_index": [0]}], "verify_responses[0]._ng_task_index"),
    ("object task index", [{"reward": 1.0, "_ng_task_index": {"i": 0}}], "verify_responses[0]._ng_task_index"),
    ("string and int task indices", [OK, {"reward": 0.0, "_ng_task_index": "1"}], "verify_responses[1]._ng_task_index"),
    ("fractional task index", [{"reward": 1.0, "_ng_task_index": 1.5}], "verify_responses[0]._ng_task_index"),
    ("string mask", [{"reward": 0.0, "mask_sample": "false"}], "verify_responses[0].mask_sample"),
    ("1e308 sums", [{"reward": 1e308, "_ng_task_index": 0}, {"reward": 1e308, "_ng_task_index": 0}], None),
    ("1e308 spread", [{"reward": 1e308}, {"reward": -1e308}, {"reward": 1.7e308}], None),
    ("masked null reward", [OK, {"reward": None, "mask_sample": True, "_ng_task_index": 1}], None),
]


@pytest.fixture(scope="module")
def servers():
    from gymlab import Lab

    with Lab() as lab:
        env = lab.serve(load_environment("counter").CounterServer)
        model = lab.serve_model(lambda request: "done")
        bound = lab.serve_agent("simple_agent", resources=env, model=model, name="bound_agent")
        alone = lab.serve_agent(load_environment("guess_number").GuessNumberAgent, model=model, name="alone_agent")
        yield {"resources server": env.url, "agent bound to it": bound.url, "agent alone": alone.url}


def post(url: str, verify_responses) -> httpx.Response:
    if isinstance(verify_responses, str):
        content = verify_responses.encode()
    else:
        import json

        content = json.dumps({"verify_responses": verify_responses}).encode()
    return httpx.post(url + "/aggregate_metrics", content=content, headers={"content-type": "application/json"})


@pytest.mark.parametrize(("name", "verify_responses", "field"), ODD, ids=[case[0] for case in ODD])
@pytest.mark.parametrize("where", ["resources server", "agent bound to it", "agent alone"])
def test_an_odd_verify_answer_is_a_422_naming_it_or_finite_metrics(servers, where, name, verify_responses, field):
    reply = post(servers[where], verify_responses)
    if field is not None:
        assert reply.status_code == 422, reply.text
        answer = reply.json()
        assert field in answer["message"], answer["message"]
        assert answer["route"] == "POST /aggregate_metrics"
        return
    assert reply.status_code == 200, reply.text
    metrics = reply.json()  # strict JSON: no NaN or Infinity could be in it
    values = [*metrics["agent_metrics"].values(), *metrics["key_metrics"].values()]
    values += [v for group in metrics["group_level_metrics"] for v in group.values() if v is not None]
    assert all(math.isfinite(v) for v in values), metrics
    rewards = [r["reward"] for r in verify_responses if not r.get("mask_sample")]
    assert metrics["agent_metrics"]["max/reward"] == max(rewards)
    assert metrics["agent_metrics"]["num_samples"] == len(verify_responses)
    mean = metrics["agent_metrics"]["mean/reward"]
    assert math.isclose(mean, sum(r / len(rewards) for r in rewards), rel_tol=1e-12, abs_tol=1e-300)


def test_the_metrics_bound_is_configurable_and_named(lab):
    env = lab.serve(load_environment("counter").CounterServer, max_metrics_body_bytes=2_000)
    small = post(env.url, [OK] * 10)
    assert small.status_code == 200 and small.json()["agent_metrics"]["num_samples"] == 10
    big = post(env.url, [OK] * 200)
    assert big.status_code == 413, big.text
    answer = big.json()
    assert answer["limit"] == 2_000 and answer["route"] == "POST /aggregate_metrics"
    assert "max_metrics_body_bytes" in answer["hint"] and "steps" in answer["hint"]
    assert lab.serve(load_environment("counter").CounterServer).server.max_metrics_body_bytes == 32 * 1024 * 1024


def test_a_run_of_huge_odd_rewards_gets_a_small_422(servers):
    reply = post(servers["resources server"], [{"reward": "x" * 10_000}] * 1_000)  # 10 MB of odd rewards
    assert reply.status_code == 422 and len(reply.content) < 10_000, len(reply.content)
    assert "verify_responses[0].reward" in reply.json()["message"] and len(reply.json()["detail"]) == 20
