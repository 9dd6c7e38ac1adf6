"""``gymlab export FILE... --format F -o OUT``: rollouts as a dataset a training library reads."""

from __future__ import annotations

import argparse

DESCRIPTION = """\
Write rollouts JSONL files (from `gymlab collect`, `Rollouts.save` or NeMo Gym) in a trainer's
format, as Parquet (-o NAME.parquet) or JSONL (-o NAME.jsonl), atomically, with a dataset card
(README.md beside the file: source runs, filters, counts, reward statistics).

formats (column names as TRL's and verl's documentation gives them):
  trl-sft   messages (prompt included; assistant tool_calls, tool messages with tool_call_id,
            reasoning_content), tools (JSON string)                      one row per episode
  trl-dpo   prompt, chosen, rejected (conversational), tools, score_chosen, score_rejected:
            the best vs the worst episode of each task; ties dropped     one row per task
  trl-kto   prompt, completion, label (reward >= --label-threshold), tools, reward
                                                                          one row per episode
  trl-grpo  prompt, ground_truth, tools, reward_mean, episodes            one row per task
  verl      data_source, prompt, ability, reward_model {style, ground_truth},
            extra_info {index, split, task_index, tools, reward_mean, episodes}
                                                                          one row per task
Masked episodes are dropped unless --keep-masked."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from gymlab.export import FORMATS

    parser.description = DESCRIPTION
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("files", nargs="+", metavar="FILE", help="rollouts JSONL files, read in order")
    parser.add_argument("-f", "--format", required=True, choices=list(FORMATS), help="the dataset format")
    parser.add_argument("-o", "--output", required=True, help="the data file: NAME.parquet or NAME.jsonl")
    parser.add_argument("--min-reward", type=float, help="keep episodes with reward >= X (DPO: the chosen one's)")
    parser.add_argument("--keep-masked", action="store_true", help="keep masked episodes (dropped by default)")
    parser.add_argument("--best-of-n", type=int, metavar="N", help="keep each task's N best episodes (sft, kto)")
    parser.add_argument(
        "--min-margin", type=float, default=0.0, help="DPO: least chosen - rejected reward of a pair (default 0)"
    )
    parser.add_argument(
        "--label-threshold", type=float, default=1.0, help="KTO: label true at or above this reward (default 1)"
    )
    parser.add_argument(
        "--ground-truth",
        action="append",
        metavar="FIELD",
        help="GRPO, verl: the row field holding the answer (repeat for several; default: the task row's own input "
        "fields, from FILE's NAME_materialized_inputs.jsonl)",
    )
    parser.add_argument("--data-source", help="verl: data_source (default: the environment's name)")
    parser.add_argument("--ability", help="verl: ability (default: tool_use when the task has tools, else chat)")
    parser.add_argument("--split", default="train", help="verl: extra_info.split (default train)")
    parser.add_argument("--no-card", action="store_true", help="do not write README.md beside the file")


def main(args: argparse.Namespace) -> int:
    from gymlab.errors import ConfigError
    from gymlab.export import FORMATS, export_dataset
    from gymlab.export.dataset import DEFAULTS

    given = {k: getattr(args, k) for k in DEFAULTS if hasattr(args, k)}  # each option's flag is its name
    given["drop_masked"] = not args.keep_masked
    given["ground_truth"] = (
        args.ground_truth[0] if args.ground_truth and len(args.ground_truth) == 1 else args.ground_truth
    )
    applies = FORMATS[args.format].options
    options = {k: v for k, v in given.items() if k in applies}
    ignored = [k for k, v in given.items() if k not in applies and v != DEFAULTS[k]]
    if ignored:
        flags = ", ".join("--keep-masked" if k == "drop_masked" else "--" + k.replace("_", "-") for k in ignored)
        raise ConfigError(f"{flags} does not apply to {args.format}")
    try:
        result = export_dataset(args.files, args.output, args.format, card=not args.no_card, **options)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    counts = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in result.counts.items())
    mean = result.rewards.get("mean")
    print(
        f"wrote {result.rows} {args.format} rows to {result.path} ({counts}; mean reward "
        f"{'—' if mean is None else f'{mean:.3f}'})" + (f"; card {result.card}" if result.card else "")
    )
    return 0
