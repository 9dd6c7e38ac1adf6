"""``gymlab demo``: the example environments with rule-based policies, in threads of one process.

Serves each example (a resources server, simple_agent and its policy model), runs every example row
several times concurrently, prints a summary table and writes the rollouts under ``./gymlab-demo/``.
"""

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
            n = len(rollouts)
            summary.append(
                (
                    env_name,
                    agent_kind,
                    n,
                    rollouts.mean_reward,
                    sum(len(r.steps) for r in rollouts) / n,
                    n / elapsed,
                    path,
                )
            )
    _print_table(summary)
    return 0


def _print_table(summary) -> None:
    header = ("environment", "agent", "episodes", "mean reward", "steps/ep", "episodes/s", "rollouts")
    rows = [(e, a, str(n), f"{m:.3f}", f"{s:.1f}", f"{eps:.0f}", str(p)) for e, a, n, m, s, eps, p in summary]
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(header)]
    line = "  ".join(h.ljust(w) for h, w in zip(header, widths))
    print(line)
    print("  ".join("-" * w for w in widths))
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)))


if __name__ == "__main__":
    p = argparse.ArgumentParser()
    add_arguments(p)
    raise SystemExit(main(p.parse_args()))
