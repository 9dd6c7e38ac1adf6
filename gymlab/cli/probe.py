"""``gymlab probe CONFIG``: the reward probes over a config's rows, on copies of its agents, and the verdict;
exit status 1 when a probe is flagged, so a CI job can refuse a reward that pays for no work."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from gymlab.errors import ConfigError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("configs", nargs="+", metavar="CONFIG", help="YAML files whose servers to run")
    parser.add_argument("-i", "--input", help="rows JSONL (default: the config's datasets)")
    parser.add_argument("--agent", help="only this agent (default: each row's agent_ref)")
    parser.add_argument("--dataset", help="only this config dataset (by name)")
    parser.add_argument("--split", help="only the config datasets of this type (example, train, benchmark...)")
    parser.add_argument("--limit", type=int, help="only the first N rows of each dataset")
    parser.add_argument("--probes", help="comma-separated built-in probe names (default: all)")
    parser.add_argument("-n", "--repeats", type=int, default=1, help="episodes per row and probe (default 1)")
    parser.add_argument("--threshold", type=float, default=0.0, help="a probe earning more is flagged (default 0)")
    parser.add_argument("--max-steps", type=int, help="model calls per episode for every agent")
    parser.add_argument("-c", "--concurrency", type=int, default=16, help="episodes at once (default 16)")
    parser.add_argument("-o", "--output", help="a folder for every probe's rollouts (AGENT/PROBE.jsonl)")


def _group(rows: list[dict[str, Any]], agents: dict, agent: str | None) -> dict[str, list[dict[str, Any]]]:
    """Rows by the agent that runs them."""
    from gymlab.collection.serving import agent_of

    if agent is not None and agent not in agents:
        raise ConfigError(f"--agent {agent!r}: no such agent in the config; agents: {', '.join(agents) or 'none'}")
    groups: dict[str, list[dict[str, Any]]] = {}
    for i, row in enumerate(rows):
        if "task_input" in row:
            raise ConfigError(
                f"row {i + 1} ({row.get('task_id')}): a taskset row runs on an environment server; "
                "probe runs flat rows through agents (pick a flat dataset with --dataset)"
            )
        groups.setdefault(agent_of(row, agents, agent, f"row {i + 1}"), []).append(row)
    return groups


def main(args: argparse.Namespace) -> int:
    from gymlab.collection.config import load_config
    from gymlab.collection.config_rows import config_rows, read_rows
    from gymlab.lab import AgentHandle, Lab
    from gymlab.probes import BUILTIN_PROBES, probe

    config = load_config(*args.configs)
    if args.input:
        rows = read_rows(args.input, flat=True)[: args.limit]
    else:
        rows = config_rows(config, dataset=args.dataset, split=args.split, limit=args.limit)
    groups = _group(rows, config.agents, args.agent)
    probes = [p.strip() for p in args.probes.split(",") if p.strip()] if args.probes else None
    unknown = [p for p in probes or () if p not in BUILTIN_PROBES]
    if unknown:
        raise ConfigError(f"--probes: unknown probe {unknown[0]!r}; built-in probes: {', '.join(BUILTIN_PROBES)}")
    agent_config = {"max_steps": args.max_steps} if args.max_steps else {}
    flagged = False
    with Lab() as lab:
        handles: dict[str, Any] = {}
        for spec in config.launch_order():
            server = spec.build({n: h.url for n, h in handles.items()}, host="127.0.0.1", port=0, num_workers=1)
            cls = {"handle_cls": AgentHandle} if spec.server_type == "responses_api_agents" else {}
            handles[spec.instance] = lab.serve(server, **cls)
        for name, agent_rows in groups.items():
            report = probe(
                lab,
                handles[name],
                agent_rows,
                probes=probes,
                threshold=args.threshold,
                repeats=args.repeats,
                concurrency=args.concurrency,
                **agent_config,
            )
            print(f"gymlab probe: {name}, {len(agent_rows)} rows x {args.repeats}\n{report.text()}\n")
            flagged = flagged or bool(report.flagged)
            if args.output:
                for probe_name, rollouts in report.rollouts.items():
                    rollouts.save(Path(args.output) / name / f"{probe_name}.jsonl")
    return 1 if flagged else 0
