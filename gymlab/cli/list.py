"""``gymlab list CONFIG...``: the environments, agents, models, datasets and tasksets of a config."""

from __future__ import annotations

import argparse
import json


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("configs", nargs="+", metavar="CONFIG", help="YAML files, merged in order")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    parser.add_argument(
        "--metrics", action="store_true", help="read each dataset and add its metrics (custom rows counted too)"
    )


def describe(config) -> dict:
    """The config's contents as plain data (what ``gymlab list`` prints)."""

    def refs(spec) -> dict:
        return {k: name for k, (_t, name) in spec.refs.items()}

    return {
        "environments": [
            {
                "name": n,
                "type": s.server_type,
                "implementation": s.implementation,
                "domain": s.domain,
                **({"refs": refs(s)} if s.refs else {}),
            }
            for n, s in config.environments.items()
        ],
        "agents": [{"name": n, "implementation": s.implementation, "refs": refs(s)} for n, s in config.agents.items()],
        "models": [{"name": n, "implementation": s.implementation} for n, s in config.models.items()],
        "datasets": [
            {
                "name": d.name,
                "type": d.type,
                "owner": d.owner,
                "path": str(d.jsonl_fpath),
                **({"taskset": d.taskset} if d.taskset else {}),
            }
            for d in config.datasets
        ],
        "tasksets": [{"name": t, "environment_server": env} for t, env in config.environment_server_routes.items()],
    }


def main(args: argparse.Namespace) -> int:
    from gymlab.collection.config import load_config

    info = describe(load_config(*args.configs))
    if args.metrics:
        from gymlab.collection.readers import file_metrics

        for dataset in info["datasets"]:
            dataset["metrics"] = file_metrics(dataset["path"])
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    for section, items in info.items():
        print(f"{section}:")
        if not items:
            print("  (none)")
        for item in items:
            head = item["name"]
            rest = ", ".join(f"{k}={v}" for k, v in item.items() if k not in ("name", "metrics") and v is not None)
            print(f"  {head}" + (f"  ({rest})" if rest else ""))
            if "metrics" in item:
                m = item["metrics"]
                print(
                    f"    {m['num_rows']} rows, {m['num_rows_with_responses_create_params']} with a valid "
                    f"responses_create_params; fields: {', '.join(m['fields']) or '-'}"
                )
    return 0
