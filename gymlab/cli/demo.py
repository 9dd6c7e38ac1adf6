"""``gymlab demo``: the example environments with rule-based policies in one Lab; a summary table, and
the rollouts under ``./gymlab-demo/``."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

#: example -> (server class attribute, agent kind)
DEMOS = {
    "calculator": ("CalculatorServer", "simple_agent"),
    "counter": ("CounterServer", "simple_agent"),
    "blackjack": ("BlackjackEnv", "gymnasium_agent"),
    "qa": ("QAEnv", "gymnasium_agent"),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--repeats", type=int, default=8, help="rollouts per row (default 8)")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--out", default="gymlab-demo", help="folder for the rollouts JSONL")


def main(args: argparse.Namespace) -> int:
    import pandas as pd

    from gymlab.examples import example_rows, load_environment
    from gymlab.lab import Lab

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = []
    with Lab() as lab:
        for env_name, (cls_name, agent_kind) in DEMOS.items():
            module = load_environment(env_name)
            env = lab.serve(getattr(module, cls_name))
            model = lab.serve_model(module.policy, name=f"{env_name}_policy")
            agent = lab.serve_agent(agent_kind, resources=env, model=model, name=f"{env_name}_agent")
            t0 = time.perf_counter()
            rollouts = lab.run_many(agent, example_rows(env_name), repeats=args.repeats, concurrency=args.concurrency)
            elapsed = time.perf_counter() - t0
            path = rollouts.save(out / f"{env_name}_rollouts.jsonl")
            n, steps = len(rollouts), sum(len(r.steps) for r in rollouts)
            row = (env_name, agent_kind, str(n), f"{rollouts.mean_reward:.3f}")
            summary.append((*row, f"{steps / n:.1f}", f"{n / elapsed:.0f}", str(path)))
    header = ("environment", "agent", "episodes", "mean reward", "steps/ep", "episodes/s", "rollouts")
    print(pd.DataFrame(summary, columns=header).to_string(index=False, justify="left"))
    return 0
