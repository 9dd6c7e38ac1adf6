"""Every example environment answers a NeMo-shaped body (all 30 request fields, null when unset,
``phase`` on messages, the reference's full response) with the reward a gymlab-shaped body gets."""

from __future__ import annotations

import httpx

from gymlab.examples import example_rows, load_environment
from tests.wire.nemo_shapes import call, call_output, gymlab_response, message, nemo_response, nemo_row, param_fields

TIMEOUT = 60.0


def shaped(row: dict, shape: str) -> dict:
    return nemo_row(row) if shape == "nemo" else row


def response(output: list[dict], shape: str, row: dict) -> dict:
    if shape == "nemo":
        return nemo_response(output, row["responses_create_params"].get("tools"))
    return gymlab_response(output)


def ok(reply: httpx.Response) -> dict:
    assert reply.status_code == 200, (
        f"{reply.request.method} {reply.request.url.path}: {reply.status_code} {reply.text}"
    )
    return reply.json()


def seed_verify(url: str, row: dict, shape: str, tools: list[tuple[str, dict]], final: str) -> float:
    """simple_agent's calls: seed, each tool call, verify with the whole trajectory."""
    body = shaped(row, shape)
    with httpx.Client(base_url=url, timeout=TIMEOUT) as client:
        ok(client.post("/seed_session", json=body))
        output = []
        for i, (name, args) in enumerate(tools):
            result = ok(client.post(f"/{name}", json=args))
            output += [call(name, args, f"call_{i}"), call_output(f"call_{i}", result)]
        output.append(message(final))
        return ok(client.post("/verify", json={**body, "response": response(output, shape, row)}))["reward"]


def reset_step(url: str, row: dict, shape: str, actions: list[list[dict]]) -> float:
    """gymnasium_agent's calls: reset, then one step per action until the episode ends; summed reward."""
    body = shaped(row, shape)
    total = 0.0
    with httpx.Client(base_url=url, timeout=TIMEOUT) as client:
        ok(client.post("/reset", json=body))
        for output in actions:
            step = ok(client.post("/step", json={**body, "response": response(output, shape, row)}))
            total += step["reward"]
            if step["terminated"] or step["truncated"]:
                break
    return total


def test_the_fixture_holds_the_thirty_fields():
    assert len(param_fields()) == 30


def test_nemo_bodies_get_the_same_reward(lab):
    """One episode per example environment with NeMo-shaped bodies, one with gymlab-shaped ones."""
    servers = {
        "calculator": lab.serve(load_environment("calculator").CalculatorServer),
        "counter": lab.serve(load_environment("counter").CounterServer),
        "stateless": lab.serve(load_environment("stateless").ReverseServer),
        "calculator_gym": lab.serve(load_environment("calculator_gym").CalculatorEnv),
        "qa": lab.serve(load_environment("qa").QAEnv),
        "blackjack": lab.serve(load_environment("blackjack").BlackjackEnv),
    }
    rewards = {shape: episode_rewards(servers, shape) for shape in ("gymlab", "nemo")}
    assert rewards["nemo"] == rewards["gymlab"]
    expected = {"calculator": 1.0, "counter": 1.0, "stateless": 1.0, "calculator_gym": 1.0, "qa": 1.0}
    assert {k: rewards["nemo"][k] for k in expected} == expected, rewards
    # The blackjack hand is dealt from the row's seed: hit then stand is one fixed outcome.
    assert rewards["nemo"]["blackjack"] in (-1.0, 0.0, 1.0)


def episode_rewards(servers: dict, shape: str) -> dict[str, float]:
    def row(name: str) -> dict:
        return example_rows(name)[0]

    return {
        "calculator": seed_verify(
            servers["calculator"].url, row("calculator"), shape, [("square", {"value": 4})], "The answer is 16."
        ),
        "counter": seed_verify(
            servers["counter"].url, row("counter"), shape, [("increment", {"by": 1})] * 3, "It reads 3."
        ),
        "stateless": seed_verify(
            servers["stateless"].url, row("stateless"), shape, [("reverse", {"text": "gymlab"})], "balmyg"
        ),
        "calculator_gym": reset_step(
            servers["calculator_gym"].url,
            row("calculator_gym"),
            shape,
            [[call("square", {"value": 4})], [message("The answer is 16.")]],
        ),
        "qa": reset_step(servers["qa"].url, row("qa"), shape, [[message("Paris.")], [message("Eiffel.")]]),
        "blackjack": reset_step(
            servers["blackjack"].url, row("blackjack"), shape, [[call("hit", {})], [call("stand", {}, "call_2")]]
        ),
    }
