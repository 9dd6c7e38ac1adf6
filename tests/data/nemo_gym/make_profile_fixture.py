"""Make the profiler fixture: a gymlab run with masked episodes and extra numeric verify fields, and
its materialized inputs, that NeMo Gym's own profiler then reads. From the repository root:

    PYTHONPATH=. python tests/data/nemo_gym/make_profile_fixture.py
    cd tests/data/nemo_gym && gym eval profile --inputs profile_inputs.jsonl --rollouts profile_rollouts.jsonl

(``gym`` is NeMo Gym 0.7.0's CLI, ``make test-nemo`` installs it in ``.venv-nemo``.) The counter
example, whose verify also answers ``exact`` (a bool) and ``distance`` (a float), and whose policy
overshoots when the distance to cover is odd, runs beside the calculator example, three repeats of
each row; then three kinds of mask are set: one failed verification, the environment's own mask on
every repeat of one task (a fully masked task), and one failed episode of the other agent.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from fastapi import Request

from gymlab import Lab
from gymlab.examples import example_rows, load_environment
from gymlab.protocol import function_call

HERE = Path(__file__).resolve().parent
counter, calculator = load_environment("counter"), load_environment("calculator")


class MeasuredCounterVerify(counter.CounterVerifyResponse):
    exact: bool = False
    distance: float = 0.0


class MeasuredCounter(counter.CounterServer):
    async def verify(self, request: Request, body: counter.CounterVerifyRequest) -> MeasuredCounterVerify:
        answer = await super().verify(request, body)
        final = answer.final_count if answer.final_count is not None else 0
        return MeasuredCounterVerify(
            **answer.model_dump(), exact=final == body.target, distance=abs(final - body.target) / 2
        )


def overshooting_policy(request):
    """The counter's policy, stepping by two: it overshoots when the distance to cover is odd."""
    items = request.input_items()
    text = " ".join(i.text for i in items if i.type == "message" and i.role == "user")
    start, target = (int(n) for n in re.findall(r"-?\d+", text)[:2])
    outputs = [i for i in items if i.type == "function_call_output"]
    count = json.loads(outputs[-1].output)["count"] if outputs else start
    return [function_call("increment", {"by": 2})] if count < target else f"The counter reads {count}."


def main() -> None:
    masks = {  # (agent, task, repeat): (failure_kind, failure_reason) of a masked episode
        ("counter_agent", 3, 2): ("judge_failed", "the judge's answer had no verdict"),
        **{("counter_agent", 0, r): (None, None) for r in range(3)},  # the environment's own mask
        ("calculator_simple_agent", 6, 0): ("transport_timeout", "the resources server did not answer"),
    }
    records, inputs = [], []
    with Lab() as lab:
        runs = [
            ("counter_agent", MeasuredCounter, overshooting_policy, example_rows("counter"), 0),
            ("calculator_simple_agent", calculator.CalculatorServer, calculator.policy, example_rows("calculator"), 5),
        ]
        for agent_name, server, policy, rows, offset in runs:
            env = lab.serve(server, name=agent_name.split("_")[0])
            agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(policy), name=agent_name)
            for record in lab.run_many(agent, rows, repeats=3):
                data = json.loads(record.model_dump_json(exclude_none=True))
                task, repeat = offset + data["_ng_task_index"], data["_ng_rollout_index"]
                data.update(_ng_task_index=task, agent_ref={"type": "responses_api_agents", "name": agent_name})
                row = {k: v for k, v in rows[task - offset].items() if k != "agent_ref"}
                inputs.append(
                    {**row, "agent_ref": {"name": agent_name}, "_ng_task_index": task, "_ng_rollout_index": repeat}
                )
                if (agent_name, task, repeat) in masks:
                    kind, reason = masks[agent_name, task, repeat]
                    data.update(mask_sample=True, reward=0.0)
                    if kind:
                        data.update(failure_kind=kind, failure_reason=reason)
                records.append(data)
    (HERE / "profile_rollouts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (HERE / "profile_inputs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in inputs))


if __name__ == "__main__":
    main()
