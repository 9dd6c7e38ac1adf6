"""Copy the ``example_rollouts.jsonl`` files a NeMo Gym 0.7.0 install ships into ``example_rollouts/``.

    python tests/data/nemo_gym/copy_examples.py /path/to/nemo-venv/lib/python3.13/site-packages

One file per server name (``environments/``, ``benchmarks/`` and ``resources_servers/`` ship the same
file under one name; those are the same bytes, checked). A file up to ``LIMIT`` bytes is copied
verbatim; a larger one keeps its first ``KEEP`` records, with every string over ``CUT`` characters cut
(a string holding JSON is cut inside, so it stays JSON): the records keep every key, type and null.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

LIMIT, KEEP, CUT = 32 * 1024, 2, 300
HERE = Path(__file__).resolve().parent / "example_rollouts"


def trim(value):
    if isinstance(value, str) and len(value) > CUT:
        if value.lstrip()[:1] in ("{", "["):
            try:
                inner = json.loads(value)
            except ValueError:
                inner = None
            if isinstance(inner, (dict, list)):
                return json.dumps(trim(inner))
        return value[:CUT] + f"...[{len(value) - CUT} characters trimmed]"
    if isinstance(value, list):
        return [trim(v) for v in value]
    if isinstance(value, dict):
        return {k: trim(v) for k, v in value.items()}
    return value


def main(site_packages: str) -> None:
    seen: dict[str, bytes] = {}
    for path in sorted(Path(site_packages).glob("*/*/data/example_rollouts.jsonl")):
        name, data = path.parts[-3], path.read_bytes()
        if name in seen:
            assert seen[name] == data, f"{name}: two different files"
            continue
        seen[name] = data
        if len(data) > LIMIT:
            lines = data.decode().splitlines()[:KEEP]
            data = ("\n".join(json.dumps(trim(json.loads(line))) for line in lines) + "\n").encode()
            print(f"trimmed {name}: {path.stat().st_size} -> {len(data)} bytes")
        (HERE / f"{name}.jsonl").write_bytes(data)


if __name__ == "__main__":
    main(sys.argv[1])
