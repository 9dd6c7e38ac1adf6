"""``gymlab init NAME [--gymnasium]``: a new environment folder (app, config, rows, test, README) that
passes its own test, with the command that runs it here (``test_command``)."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from string import Template


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", metavar="NAME", help="the folder to create; its last part names the environment")
    parser.add_argument(
        "--gymnasium",
        action="store_true",
        help="a GymnasiumServer with reset/step (default: a SimpleResourcesServer with verify)",
    )


def files(name: str, gymnasium: bool) -> dict[str, str]:
    """Relative path -> text of every file of environment ``name``."""
    from gymlab.cli import init_templates as t

    cls = "".join(part[:1].upper() + part[1:] for part in re.split(r"[^0-9A-Za-z]+", name) if part)
    if not cls[:1].isalpha():
        cls = "Env" + cls
    agent, server = ("gymnasium_agent", f"{cls}Env") if gymnasium else ("simple_agent", f"{cls}Server")
    values = {"name": name, "cls": cls, "agent": agent, "server": server}
    values["seed"] = '{"task_data": {"expected_count": 2}}' if gymnasium else '{"task_data": {}}'
    values["verify_body"] = (
        "None" if gymnasium else '{**ROWS[0], "response": {"output": []}}'
    )  # a GymnasiumServer has no /verify
    fill = lambda text: Template(text).substitute(values)  # noqa: E731
    rows = [
        {
            "responses_create_params": {
                "input": [
                    {"role": "developer", "content": "Count words with the count_words tool."},
                    {"role": "user", "content": f'How many words are in "{sentence}"?'},
                ],
                "tools": [t.TOOL],
            },
            "expected_count": len(sentence.split()),
            "agent_ref": {"type": "responses_api_agents", "name": f"{name}_{agent}"},
        }
        for sentence in t.SENTENCES
    ]
    return {
        "app.py": fill(t.GYMNASIUM_APP if gymnasium else t.SIMPLE_APP),
        f"configs/{name}.yaml": fill(t.CONFIG),
        "data/example.jsonl": "".join(json.dumps(row) + "\n" for row in rows),
        "test_app.py": fill(t.TEST),
        "README.md": fill(t.README),
    }


def refusal(name: str) -> str | None:
    """Why ``name`` cannot name an environment (its own files or test would break on it), or None."""
    import keyword

    import yaml

    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name):
        return "start with a letter; letters, digits and _ only"
    if (read := yaml.safe_load(name)) != name:
        return f"YAML reads it as {read!r}, so it cannot be a key of the config"
    if keyword.iskeyword(name):
        return "it is a Python keyword"
    if name == "test":
        return "its app would be imported as test_app, the name of its own test module"
    return None


def test_command(folder: Path) -> str:
    """The command that runs the new folder's test: ``python -m pytest`` when this Python has pytest, else
    ``python test_app.py`` (a `make demo` venv); the interpreter by its path when ``python`` is another one."""
    import importlib.util
    import shlex
    import shutil
    import sys

    on_path = shutil.which("python")
    same = on_path is not None and Path(on_path).resolve() == Path(sys.executable).resolve()
    python = "python" if same else shlex.quote(sys.executable)
    try:
        has_pytest = importlib.util.find_spec("pytest") is not None
    except (ImportError, ValueError):
        has_pytest = False
    run = f"{python} -m pytest" if has_pytest else f"{python} test_app.py"
    return f"cd {shlex.quote(str(folder))} && {run}"


def main(args: argparse.Namespace) -> int:
    from gymlab.errors import GymlabError

    folder = Path(args.name)
    name = folder.resolve().name
    if reason := refusal(name):
        raise GymlabError(f"{name!r} is not a usable name: {reason} (nothing was written)")
    if folder.exists():
        raise GymlabError(f"{folder} already exists; choose another name (nothing was written)")
    for relative, text in files(name, args.gymnasium).items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    kind = "GymnasiumServer" if args.gymnasium else "SimpleResourcesServer"
    print(f"wrote {folder}/ (a {kind}); try: {test_command(folder)}")
    return 0
