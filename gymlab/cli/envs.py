"""``gymlab envs [ADAPTER [NAME]]``: what each adapter of ``gymlab.envs`` offers, rows of one of its
environments (``--rows OUT``), and a probe pass over every reasoning-gym dataset (``--probe``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections import Counter
from typing import Any

ADAPTERS = ("reasoning_gym", "textarena", "gymnasium")

#: The built-in probes that apply to a task without tools, and the non-answers in answer tags.
PASS_PROBES = ("empty_answer", "echo_prompt", "answer_spray", "long_answer", "refusal")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("adapter", nargs="?", choices=ADAPTERS, help="list what this adapter offers")
    parser.add_argument("name", nargs="?", help="a dataset, game or env id (with --rows; with --probe: a,b,c)")
    parser.add_argument("--rows", metavar="OUT", help="write the rows of NAME to this JSONL file")
    parser.add_argument("--size", type=int, default=8, help="reasoning_gym: entries per dataset (default 8)")
    parser.add_argument("--seed", type=int, default=0, help="reasoning_gym: the dataset seed (default 0)")
    parser.add_argument("--seeds", type=int, default=4, help="textarena, gymnasium: rows for seeds 0..N-1")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a config field (VALUE read as JSON)"
    )
    parser.add_argument("--probe", action="store_true", help="reasoning_gym: the probe pass (every dataset or NAME)")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def offered(adapter: str) -> list[str]:
    """The environments ``adapter`` offers here (``ImportError`` naming the extra when not installed)."""
    if adapter == "reasoning_gym":
        from gymlab.envs.reasoning import datasets

        return datasets()
    if adapter == "textarena":
        from gymlab.envs.arena import games

        return games()
    from gymlab.envs.gym_env import env_ids

    return env_ids()


def _fields(pairs: list[str]) -> dict[str, Any]:
    from gymlab.errors import ConfigError

    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ConfigError(f"--set {pair!r}: expected KEY=VALUE")
        try:
            out[key] = json.loads(value)
        except ValueError:
            out[key] = value
    return out


def rows_of(adapter: str, name: str, args: argparse.Namespace) -> tuple[Any, list[dict[str, Any]]]:
    """``(server, rows)`` of ``name`` with the command line's settings."""
    import gymlab.envs as envs

    fields = _fields(args.set)
    if adapter == "reasoning_gym":
        return envs.reasoning_gym(name, size=args.size, seed=args.seed, **fields)
    return getattr(envs, adapter)(name, seeds=range(args.seeds), **fields)


def main(args: argparse.Namespace) -> int:
    from gymlab.errors import ConfigError

    if args.probe:
        if args.adapter != "reasoning_gym":
            raise ConfigError("--probe runs over reasoning_gym's datasets: gymlab envs reasoning_gym --probe")
        names = args.name.split(",") if args.name else None
        with contextlib.redirect_stdout(sys.stderr):  # some datasets print while they generate or score
            table = probe_reasoning_gym(names, size=args.size, seed=args.seed)
        print(json.dumps(table, indent=1) if args.json else markdown(table))
        return 0
    if args.rows:
        if not (args.adapter and args.name):
            raise ConfigError("--rows needs an adapter and a name: gymlab envs reasoning_gym chain_sum --rows OUT")
        from gymlab.jsonl import write_jsonl_atomic

        try:
            server, rows = rows_of(args.adapter, args.name, args)
        except (LookupError, ValueError, TypeError, RuntimeError) as exc:
            raise ConfigError(str(exc)) from None
        write_jsonl_atomic(args.rows, rows)
        print(
            f"wrote {len(rows)} rows of {args.name} to {args.rows}; serve them with resources server {args.adapter!r}"
        )
        return 0
    if args.adapter:
        names = _available(args.adapter)
        print(json.dumps(names) if args.json else "\n".join(names))
        return 0
    summary = {}
    for adapter in ADAPTERS:
        try:
            names = offered(adapter)
        except ImportError as exc:
            summary[adapter] = {"installed": False, "error": str(exc)}
            continue
        summary[adapter] = {"installed": True, "count": len(names), "names": names}
    if args.json:
        print(json.dumps(summary, indent=1))
        return 0
    for adapter, info in summary.items():
        if info["installed"]:
            print(f"{adapter}: {info['count']}: {', '.join(info['names'][:8])}, ... (gymlab envs {adapter})")
        else:
            print(f"{adapter}: {info['error']}")
    return 0


def _available(adapter: str) -> list[str]:
    """Every name; a TextArena game that cannot run here says why."""
    names = offered(adapter)
    if adapter != "textarena":
        return names
    return asyncio.run(_listed_games(names))


async def _listed_games(names: list[str], budget_s: float = 3.0) -> list[str]:
    """``listed_game`` of each name in two worker processes (games reset in parallel, a slow one stopped
    after ``budget_s`` and listed as it is: slow to reset is no fault)."""
    from gymlab._runtime.offload import WorkerPool
    from gymlab.errors import WorkBudgetExceeded, WorkerDied

    pool = WorkerPool(2, name="gymlab-envs")

    async def one(name: str) -> str:
        try:
            return await pool.run(listed_game, name, budget_s=budget_s)
        except (WorkBudgetExceeded, WorkerDied):
            return name

    try:
        return list(await asyncio.gather(*(one(n) for n in names)))
    finally:
        pool.close()


def listed_game(name: str) -> str:
    """A TextArena game's line: its id, and why it cannot run here when it cannot (does not compile, asks a
    hosted model, would download, does not reset), found without downloading anything."""
    from gymlab.envs.arena_checks import GameUnavailable, check_offline, reset_problem

    try:
        check_offline(name)
        why = reset_problem(name)
    except GameUnavailable as exc:
        why = str(exc).removeprefix(f"TextArena game {name} ").split(", not found")[0].split(" (an API")[0]
    return f"{name}  ({why})" if why else name


# -- the probe pass over reasoning-gym -----------------------------------------------------------------


def _answers(text: str) -> str:
    return f"<answer>{text}</answer>"


def probe_reasoning_gym(
    names: list[str] | None = None, *, size: int = 4, seed: int = 0, concurrency: int = 32
) -> dict[str, Any]:
    """Every dataset's rows (``size`` entries from ``seed``) through gymlab's probes, answer tags added.

    Per dataset: the oracle's mean reward (its own answer in tags; below 1 means the dataset does not
    accept its own answer), each probe's mean reward (a non-answer that earns anything is flagged),
    how many distinct answers its entries have, and whether the most common answer in tags earns
    reward everywhere (a constant task at these settings). Datasets that cannot be built without
    settings (``composite``) are listed as skipped.
    """
    import gymlab.envs as envs
    from gymlab.lab import Lab
    from gymlab.probes import BUILTIN_PROBES, probe
    from gymlab.probes.policies import answer_spray

    started = time.perf_counter()
    names = names or offered("reasoning_gym")
    rows, skipped = [], {}
    for name in names:
        try:
            rows += envs.reasoning_gym(name, size=size, seed=seed)[1]
        except (LookupError, ValueError) as exc:
            skipped[name] = str(exc).split(";")[0]
    truth = {row["question"]: row for row in rows}
    common = {}
    for name in names:
        answers = [json.dumps(r["answer"]) for r in rows if r["reasoning_gym"]["dataset"] == name]
        if answers and set(answers) == {"null"}:  # no single answer (graph_color: any proper colouring)
            common[name] = (0, "null")
        elif answers:
            common[name] = (len(set(answers)), Counter(answers).most_common(1)[0][0])

    def question(request) -> str:
        return [i.text for i in request.input_items() if i.type == "message" and i.role == "user"][-1]

    def text(value: Any) -> str:
        return value if isinstance(value, str) else "" if value is None else json.dumps(value)

    policies = {name: BUILTIN_PROBES[name] for name in PASS_PROBES}
    policies["tagged_empty"] = lambda request: _answers("")
    policies["tagged_echo"] = lambda request: _answers(question(request))
    policies["tagged_spray"] = lambda request: _answers(answer_spray(request))
    policies["majority_answer"] = lambda request: _answers(
        text(json.loads(common[truth[question(request)]["reasoning_gym"]["dataset"]][1]))
    )

    def oracle(request):
        return _answers(text(truth[question(request)]["answer"]))

    with Lab() as lab:
        env = lab.serve(
            envs.ReasoningGymServer, name="reasoning_gym", max_datasets=max(len(names), 1), work_processes=1
        )
        report = probe(lab, env, rows, probes=policies, real_policy=oracle, concurrency=concurrency)
    frame = report.frame
    frame["dataset"] = [rows[t]["reasoning_gym"]["dataset"] for t in frame["task"]]
    means = frame.groupby(["dataset", "probe"])["mean_reward"].mean().unstack()
    oracle_means = frame.groupby("dataset")["real_reward"].mean()
    masked = frame.groupby("dataset")["masked"].sum()
    datasets = {}
    for name in sorted(common):
        paid = {p: round(float(means.loc[name, p]), 4) for p in policies if float(means.loc[name, p]) > 0}
        distinct, _ = common[name]
        datasets[name] = {
            "oracle": round(float(oracle_means[name]), 4) if distinct else None,
            "paid": {p: v for p, v in paid.items() if p != "majority_answer"},
            "distinct_answers": distinct,
            "constant": paid.get("majority_answer", 0.0) >= 1.0,
            "masked": int(masked[name]),
        }
    return {
        "size": size,
        "seed": seed,
        "episodes": int(frame["episodes"].sum()) + len(rows),
        "seconds": round(time.perf_counter() - started, 1),
        "datasets": datasets,
        "skipped": skipped,
    }


def markdown(table: dict[str, Any]) -> str:
    """The probe pass as a Markdown table: the datasets with a finding, then a summary line."""
    lines = [
        "| dataset | oracle | non-answers that pay (mean reward) | distinct answers | constant |",
        "|---|---|---|---|---|",
    ]
    found = 0
    for name, d in table["datasets"].items():
        if not (d["paid"] or d["constant"] or (d["oracle"] is not None and d["oracle"] < 1) or d["masked"]):
            continue
        found += 1
        paid = ", ".join(f"{p} {v:g}" for p, v in d["paid"].items()) or "none"
        masked = f" ({d['masked']} masked)" if d["masked"] else ""
        lines.append(
            f"| {name} | {'no single answer' if d['oracle'] is None else format(d['oracle'], 'g')}{masked} | {paid} "
            f"| {d['distinct_answers'] or '-'} | {'yes' if d['constant'] else ''} |"
        )
    skipped = ", ".join(table["skipped"]) or "none"
    lines.append("")
    lines.append(
        f"{len(table['datasets'])} datasets at size {table['size']}, seed {table['seed']}: {found} with a finding "
        f"above, the rest clean (the oracle scores 1, no non-answer earns anything); skipped: {skipped}; "
        f"{table['episodes']} episodes in {table['seconds']} s."
    )
    return "\n".join(lines)
