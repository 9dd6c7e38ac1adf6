"""``gymlab merge OUT.jsonl SHARD.jsonl...``: shard outputs of ``gymlab collect --shard`` as one collection
(exit status 2, naming files and lines, on conflicting, unfinished or foreign shards, or an OUT it would shrink)."""

from __future__ import annotations

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("output", metavar="OUT.jsonl", help="the merged collection; companion files go next to it")
    parser.add_argument("shards", nargs="+", metavar="SHARD.jsonl", help="the shard outputs to join")
    parser.add_argument("--resources-url", help="a resources server whose /aggregate_metrics computes the metrics")
    parser.add_argument(
        "--force", action="store_true", help="replace an existing OUT.jsonl even if the merge lacks some of its records"
    )
    parser.add_argument(
        "--allow-partial",
        action="store_true",
        help="merge an unfinished shard: the rollouts it never finished are written as failures (cancelled)",
    )


def main(args: argparse.Namespace) -> int:
    from gymlab.collection.merge import merge

    options = dict(resources_url=args.resources_url, overwrite=args.force, allow_partial=args.allow_partial)
    result = merge(args.output, *args.shards, **options)
    print(
        f"gymlab merge: {result.n_rollouts} rollouts from {len(args.shards)} shards in {result.output}, "
        f"{result.n_failures} still failed, mean reward {result.mean_reward:.3f}"
    )
    return 0
