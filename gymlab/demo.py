"""``gymlab demo``: the example environments with rule-based policies, in threads of one process.

Serves each example (a resources server, simple_agent and its policy model), runs every example row
several times concurrently, prints a summary table and writes the rollouts under ``./gymlab-demo/``.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from pathlib import Path

from gymlab._sync import run_sync

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
    from gymlab.rollout_files import write_jsonl_atomic

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = []
    with Lab() as lab:
        for env_name, (cls_name, agent_kind) in DEMOS.items():
            module = load_environment(env_name)
            env = lab.serve(getattr(module, cls_name))
            model = lab.serve_model(module.policy, name=f"{env_name}_policy")
            agent = lab.serve_agent(agent_kind, resources=env, model=model, name=f"{env_name}_agent")
            rows = example_rows(env_name)
            batch = [(t, r, row) for t, row in enumerate(rows) for r in range(args.repeats)]
            t0 = time.perf_counter()
            results = run_sync(_run_all(agent, [row for _, _, row in batch], args.concurrency))
            elapsed = time.perf_counter() - t0
            records = []
            for (task, repeat, _), rollout in zip(batch, results):
                record = rollout.model_dump(mode="json", exclude_none=True)
                record.update(_ng_task_index=task, _ng_rollout_index=repeat,
                              agent_ref={"type": "responses_api_agents", "name": agent.name})
                records.append(record)
            path = out / f"{env_name}_rollouts.jsonl"
            write_jsonl_atomic(path, records)
            rewards = [r.reward for r in results]
            summary.append((env_name, agent_kind, len(results), sum(rewards) / len(rewards),
                            sum(len(r.steps) for r in results) / len(results), len(results) / elapsed, path))
    _print_table(summary)
    return 0


async def _run_all(agent, rows, concurrency):
    return await agent.arun_many(rows, concurrency=concurrency)


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
