"""``gymlab profile FILE``: the reward profile of a rollouts file (gymlab's or NeMo Gym's), task by task;
``--nemo`` also writes NeMo Gym's three profiler files beside FILE, ``--plot PNG`` the per-task means."""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", metavar="FILE", help="a rollouts JSONL file")
    parser.add_argument("--inputs", metavar="JSONL", help="the materialized input rows (NeMo Gym's `sample` field)")
    parser.add_argument("--threshold", type=float, default=1.0, help="reward at which an episode succeeds (1.0)")
    parser.add_argument("--nemo", action="store_true", help="write NeMo Gym's three profiler files beside FILE")
    parser.add_argument(
        "--masked-as-missing",
        action="store_true",
        help="with --nemo: count a masked rollout as missing (gymlab's view) rather than drop it with its input row",
    )
    parser.add_argument("--plot", metavar="PNG", help="save a histogram of per-task mean rewards")
    parser.add_argument("--json", action="store_true", help="print the per-task rows and summary as JSON")


def main(args: argparse.Namespace) -> int:
    from gymlab.collection.readers import read_jsonl
    from gymlab.rewards.profile import profile

    result = profile(read_jsonl(args.file, "rollout"), threshold=args.threshold)
    if args.json:
        rows = json.loads(result.tasks.to_json(orient="records"))
        print(json.dumps({"tasks": rows, "summary": result.summary}, indent=2, default=str))
    else:
        import pandas as pd

        with pd.option_context("display.width", 200, "display.max_columns", 40):
            table = result.tasks.drop(columns="why", errors="ignore")  # the flags' sentences follow it
            print(table.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        for task, why in result.flags().items():
            print(f"flagged task {task}: {why}")
        if len(result.components):
            print("\ncomponents:")
            print(result.components.to_string(index=False, float_format=lambda v: f"{v:.3f}"))
        print()
        for key, value in result.summary.items():
            print(f"{key}: {value}")
    if args.nemo:
        inputs = None
        if args.inputs:
            from gymlab.jsonl import iter_jsonl

            inputs = [row for _, row in iter_jsonl(args.inputs)]
        for path in result.write_nemo(args.file, inputs, masked_as_missing=args.masked_as_missing):
            print(f"wrote {path}")
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        ax = result.plot()
        ax.figure.savefig(args.plot, dpi=100, bbox_inches="tight")
        print(f"wrote {args.plot}")
    return 0
