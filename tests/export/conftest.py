"""Collected example rollouts for the export tests: a calculator policy that thinks, sometimes answers
from memory (reward 0) and once fails (a masked episode); and counter episodes whose rows carry a
ground truth (``target``)."""

from __future__ import annotations

import os
import re

import pytest

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")  # load_dataset reads local files only
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from gymlab import Lab, Reasoning, function_call  # noqa: E402
from gymlab.examples import example_rows, load_environment  # noqa: E402


def thinking_sometimes_lazy(calculator):
    """Every third first turn skips the tool (reward 0); the tenth raises (a masked episode)."""
    calls = {"n": 0}

    def policy(request):
        items = request.input_items()
        if items and items[-1].type == "function_call_output":
            return calculator.policy(request)
        calls["n"] += 1
        if calls["n"] == 10:
            raise RuntimeError("the model fell over")
        n = int(re.findall(r"-?\d+", items[-1].text)[-1])
        if calls["n"] % 3 == 0:
            return f"It is {n * n}, I think."
        thought = Reasoning(summary=[{"type": "summary_text", "text": f"I should square {n} with the tool."}])
        return [thought, function_call("square", {"value": n})]

    return policy


@pytest.fixture(scope="module")
def collected():
    """(calculator rollouts, counter rollouts), collected once per module, one at a time (deterministic)."""
    calculator, counter = load_environment("calculator"), load_environment("counter")
    with Lab() as lab:
        env = lab.serve(calculator.CalculatorServer)
        model = lab.serve_model(thinking_sometimes_lazy(calculator), name="lazy_model")
        agent = lab.serve_agent("simple_agent", resources=env, model=model)
        calc = lab.run_many(agent, example_rows("calculator"), repeats=4, concurrency=1)
        cenv = lab.serve(counter.CounterServer)
        cagent = lab.serve_agent(
            "simple_agent", resources=cenv, model=lab.serve_model(counter.policy, name="counter_model"), name="cagent"
        )
        count = lab.run_many(cagent, example_rows("counter"), repeats=2, concurrency=1)
    return calc, count
