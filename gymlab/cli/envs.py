"""``gymlab envs [ADAPTER [NAME]]``: what each adapter of ``gymlab.envs`` offers (OpenEnv: the environment
packages installed; verifiers: the tasksets it ships), rows of one of its environments (``--rows OUT``),
and a probe pass over every reasoning-gym dataset (``--probe``)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from typing import Any

#: adapter -> (module, the function listing what it offers here)
ADAPTERS = {
    "reasoning_gym": ("gymlab.envs.reasoning", "datasets"),
    "textarena": ("gymlab.envs.arena", "games"),
    "gymnasium": ("gymlab.envs.gym_env", "env_ids"),
    "openenv": ("gymlab.envs.open_env", "installed_environments"),
    "verifiers": ("gymlab.envs.verifiers_env", "shipped_tasksets"),
}

#: The built-in probes that apply to a task without tools (the guesses answer in the prompt's answer tags).
PASS_PROBES = ("empty_answer", "echo_prompt", "answer_spray", "long_answer", "refusal", "short_constant")
#: A dataset is flagged when a non-answer earns more than this mean reward on it (below: a format
#: reward of 0.01, the partial credit a spray earns for holding the answer).
PASS_THRESHOLD = 0.05


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("adapter", nargs="?", choices=list(ADAPTERS), help="list what this adapter offers")
    parser.add_argument(
        "name",
        nargs="?",
        help="a dataset, game or env id; openenv: a server URL or module:Environment; verifiers: module:taskset "
        "(with --rows; with --probe: a,b,c)",
    )
    parser.add_argument("--rows", metavar="OUT", help="write the rows of NAME to this JSONL file")
    parser.add_argument("--size", type=int, default=8, help="reasoning_gym: entries per dataset (default 8)")
    parser.add_argument("--seed", type=int, default=0, help="reasoning_gym: the dataset seed (default 0)")
    parser.add_argument("--seeds", type=int, default=4, help="textarena, gymnasium: rows for seeds 0..N-1")
    parser.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="a config field (VALUE read as JSON)"
    )
    parser.add_argument("--probe", action="store_true", help="reasoning_gym: the probe pass (every dataset or NAME)")
    parser.add_argument(
        "--threshold",
        type=float,
        default=PASS_THRESHOLD,
        help=f"--probe: a non-answer earning more flags its dataset (default {PASS_THRESHOLD})",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def offered(adapter: str) -> list[str]:
    """The environments ``adapter`` offers here (``ImportError`` naming the extra when not installed)."""
    import importlib

    module, lister = ADAPTERS[adapter]
    return getattr(importlib.import_module(module), lister)()


def _imported(spec: str) -> Any:
    """``module:attribute`` imported (an OpenEnv Environment class, a verifiers taskset)."""
    import importlib

    from gymlab.errors import ConfigError

    module, sep, attribute = spec.partition(":")
    if not sep:
        raise ConfigError(f"{spec!r}: expected module:attribute (e.g. my_env.server:MyEnvironment)")
    try:
        return getattr(importlib.import_module(module), attribute)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"{spec!r} cannot be imported: {exc}") from None


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
    if adapter == "openenv":
        env = name if name.startswith(("http://", "https://")) else _imported(name)
        return envs.openenv(env, seeds=range(args.seeds), **fields)
    if adapter == "verifiers":
        return envs.verifiers(_imported(name), **fields)
    return getattr(envs, adapter)(name, seeds=range(args.seeds), **fields)


def main(args: argparse.Namespace) -> int:
    from gymlab.errors import ConfigError

    if args.probe:
        if args.adapter != "reasoning_gym":
            raise ConfigError("--probe runs over reasoning_gym's datasets: gymlab envs reasoning_gym --probe")
        names = args.name.split(",") if args.name else None
        with contextlib.redirect_stdout(sys.stderr):  # some datasets print while they generate or score
            table = probe_reasoning_gym(names, size=args.size, seed=args.seed, threshold=args.threshold)
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
        names = offered(args.adapter)
        if args.adapter == "textarena":  # a game that cannot run here says why
            names = asyncio.run(_listed_games(names))
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
    none = {"openenv": "no OpenEnv environment package found (any Environment class or server URL serves)"}
    for adapter, info in summary.items():
        if not info["installed"]:
            print(f"{adapter}: {info['error']}")
        elif info["names"]:
            print(f"{adapter}: {info['count']}: {', '.join(info['names'][:8])}, ... (gymlab envs {adapter})")
        else:
            print(f"{adapter}: installed; {none.get(adapter, 'nothing found')}")
    return 0


async def _listed_games(names: list[str], budget_s: float = 3.0) -> list[str]:
    """``listed_game`` of each name in two worker processes; a game slow to reset is listed as it is."""
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
    names: list[str] | None = None,
    *,
    size: int = 4,
    seed: int = 0,
    concurrency: int = 32,
    threshold: float = PASS_THRESHOLD,
) -> dict[str, Any]:
    """Every dataset's rows (``size`` entries from ``seed``) through gymlab's probes, answer tags added: per
    dataset the oracle's mean reward, what each non-answer earns, the runs that flag it (``ProbeReport``'s
    rule), its distinct answers and whether one answer pays everywhere (docs/probes.md)."""
    import gymlab.envs as envs
    from gymlab.lab import Lab
    from gymlab.probes import BUILTIN_PROBES, ProbeReport, probe
    from gymlab.probes.candidates import RowIndex
    from gymlab.probes.policies import answer_spray, majority_answer, prompt_number_alone

    started = time.perf_counter()
    names = names or offered("reasoning_gym")
    rows, skipped = [], {}
    for name in names:
        try:
            rows += envs.reasoning_gym(name, size=size, seed=seed)[1]
        except (LookupError, ValueError) as exc:
            skipped[name] = str(exc).split(";")[0]
    truth = {row["question"]: row for row in rows}
    tasks: dict[str, list[int]] = {}
    for i, row in enumerate(rows):
        tasks.setdefault(row["reasoning_gym"]["dataset"], []).append(i)
    by_dataset = {name: RowIndex(rows[i] for i in found) for name, found in tasks.items()}

    def question(request) -> str:
        return [i.text for i in request.input_items() if i.type == "message" and i.role == "user"][-1]

    def majority(request):
        """The other entries of this task's dataset: their most common answer, in answer tags."""
        return majority_answer(request, by_dataset[truth[question(request)]["reasoning_gym"]["dataset"]])

    majority.guess = True  # a guess, as the built-in majority_answer is
    policies = {name: BUILTIN_PROBES[name] for name in PASS_PROBES}
    policies["prompt_number"] = prompt_number_alone
    policies["majority_answer"] = majority
    policies["tagged_empty"] = lambda request: _answers("")
    policies["tagged_echo"] = lambda request: _answers(question(request))
    policies["tagged_spray"] = lambda request: _answers(answer_spray(request))

    def oracle(request):
        answer = truth[question(request)]["answer"]
        return _answers(answer if isinstance(answer, str) else "" if answer is None else json.dumps(answer))

    with Lab() as lab:
        env = lab.serve(
            envs.ReasoningGymServer, name="reasoning_gym", max_datasets=max(len(names), 1), work_processes=1
        )
        report = probe(lab, env, rows, probes=policies, real_policy=oracle, concurrency=concurrency)
    datasets = {}
    for name in sorted(tasks):
        mine = set(tasks[name])
        part = ProbeReport(
            {run: [r for r in rs if r.task_index in mine] for run, rs in report.rollouts.items()},
            real=[r for r in report.real if r.task_index in mine],
            threshold=threshold,
            policies=report.policies,
        )
        answers = [json.dumps(rows[i]["answer"]) for i in tasks[name]]
        distinct = 0 if set(answers) == {"null"} else len(set(answers))  # null: any proper answer (graph_color)
        means = {run: part.cell(run).mean_reward for run in part.rollouts}
        datasets[name] = {
            "oracle": round(part.real_reward(None), 4) if distinct else None,
            "paid": {run: round(m, 4) for run, m in means.items() if m > 0},
            "flagged": part.flagged,
            "distinct_answers": distinct,
            "constant": means["majority_answer"] >= 1.0,
            "masked": sum(c.masked for c in (part.cell(run) for run in part.rollouts)),
        }
    return {
        "size": size,
        "seed": seed,
        "threshold": threshold,
        "episodes": sum(len(rs) for rs in report.rollouts.values()) + len(report.real),
        "seconds": round(time.perf_counter() - started, 1),
        "datasets": datasets,
        "skipped": skipped,
    }


def _runs(values: dict[str, str]) -> str:
    """Runs and their values, a probe's variants together: ``refusal 0.01, short_constant (0 1, 7 0.5)``;
    more than three variants of one value as ``short_constant (all 19: 0.01)``."""
    grouped: dict[str, list[tuple[str, str]]] = {}
    for run, value in values.items():
        name, _, variant = run.partition(":")
        grouped.setdefault(name, []).append((variant, value))
    parts = []
    for name, runs in grouped.items():
        if not runs[0][0]:
            parts.append(f"{name} {runs[0][1]}")
        elif len(runs) > 3 and len({v for _, v in runs}) == 1:
            parts.append(f"{name} (all {len(runs)}: {runs[0][1]})")
        else:
            parts.append(f"{name} ({', '.join(f'{variant} {v}' for variant, v in runs)})")
    return ", ".join(parts)


def markdown(table: dict[str, Any]) -> str:
    """The probe pass as a Markdown table of the datasets with a finding, then a summary line."""
    lines = [
        "| dataset | oracle | flagged by (mean reward, or masked) | paid below the threshold | distinct answers "
        "| constant |",
        "|---|---|---|---|---|---|",
    ]
    found = below = 0
    for name, d in table["datasets"].items():
        paid = d["paid"]
        # a run flagged without paying above the threshold was masked more often than the oracle
        flagged = {r: f"{paid[r]:g}" if paid.get(r, 0) > table["threshold"] else "masked" for r in d["flagged"]}
        rest = {run: f"{m:g}" for run, m in paid.items() if run not in flagged}
        below += bool(rest) and not flagged
        if not (flagged or d["constant"] or (d["oracle"] is not None and d["oracle"] < 1) or d["masked"]):
            continue
        found += 1
        masked = f" ({d['masked']} masked)" if d["masked"] else ""
        oracle = "no single answer" if d["oracle"] is None else format(d["oracle"], "g")
        lines.append(
            f"| {name} | {oracle}{masked} | {_runs(flagged) or 'none'} | {_runs(rest) or 'none'} "
            f"| {d['distinct_answers'] or '-'} | {'yes' if d['constant'] else ''} |"
        )
    skipped = ", ".join(table["skipped"]) or "none"
    clean = len(table["datasets"]) - found - below
    lines.append("")
    lines.append(
        f"{len(table['datasets'])} datasets at size {table['size']}, seed {table['seed']}: {found} with a finding "
        f"above, {below} paying a non-answer no more than {table['threshold']:g} (a format reward, partial "
        f"credit), {clean} paying none; skipped: {skipped}; {table['episodes']} episodes in {table['seconds']} s."
    )
    return "\n".join(lines)
