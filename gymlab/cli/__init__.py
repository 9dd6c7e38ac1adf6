"""The ``gymlab`` command: each subcommand in its own module, imported only when used; a user mistake
(``GymlabError``) prints one line and exits 2, no traceback."""

from __future__ import annotations

import argparse
import importlib
import sys

#: subcommand -> (module, help). Each module has ``add_arguments(parser)`` and ``main(args) -> int``.
COMMANDS = {
    "serve": ("gymlab.cli.serve", "run every server of a YAML config, each in its own process"),
    "collect": ("gymlab.cli.collect", "collect rollouts of a dataset into resumable JSONL files"),
    "merge": ("gymlab.cli.merge", "join the outputs of 'gymlab collect --shard' runs into one collection"),
    "list": ("gymlab.cli.list", "list the environments, agents, datasets and tasksets of a config"),
    "demo": ("gymlab.cli.demo", "run the example environments with rule-based policies"),
    "profile": ("gymlab.cli.profile", "profile the rewards of a rollouts file, task by task"),
    "init": ("gymlab.cli.init", "write a new environment folder that passes its own test"),
    "export": ("gymlab.cli.export", "write rollouts as a TRL or verl dataset (Parquet or JSONL) with a dataset card"),
    "probe": ("gymlab.cli.probe", "run adversarial policies to find out whether a reward can be gamed"),
    "envs": ("gymlab.cli.envs", "list what reasoning-gym, TextArena and Gymnasium offer; write rows; probe them"),
}


def main(argv: list[str] | None = None) -> int:
    from gymlab._version import __version__
    from gymlab.errors import GymlabError

    parser = argparse.ArgumentParser(prog="gymlab", description="Research toolkit for LLM environments.")
    parser.add_argument("--version", action="version", version=f"gymlab {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text)
        p.set_defaults(_module=module)
        importlib.import_module(module).add_arguments(p)
    args = parser.parse_args(argv)
    try:
        return int(importlib.import_module(args._module).main(args) or 0)
    except GymlabError as exc:
        print(f"gymlab {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"gymlab {args.command}: interrupted", file=sys.stderr)
        return 130
