"""The dataset card beside an export: a README.md that ``datasets`` and the Hub read, and a person checks."""

from __future__ import annotations

import datetime as _dt
import json
import math
from collections import Counter
from typing import Any

from gymlab._version import __version__
from gymlab.export.trainers import Built


def reward_stats(rewards: list[float]) -> dict[str, Any]:
    """Count, mean, standard deviation, min and max (None when there are no rewards)."""
    if not rewards:
        return {"count": 0, "mean": None, "std": None, "min": None, "max": None}
    mean = math.fsum(rewards) / len(rewards)
    std = math.sqrt(math.fsum((r - mean) ** 2 for r in rewards) / len(rewards))
    return {"count": len(rewards), "mean": mean, "std": std, "min": min(rewards), "max": max(rewards)}


def config_name(format: str, digest: str) -> str:
    """The card's config name: the format and the first 16 hex digits of the data file's SHA-256."""
    return f"{format}-{digest[:16]}" if digest else format


def file_digest(path: Any) -> str:
    """The SHA-256 of a file's bytes, read in 1 MiB blocks."""
    import hashlib

    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "—" if value is None else str(value)


def card_text(
    *,
    fmt: Any,
    data_file: str,
    sources: list[str],
    records: list[Any],
    options: dict[str, Any],
    built: Built,
    rewards: dict[str, Any],
    digest: str = "",
) -> str:
    """The card's Markdown, YAML front matter first (``built``: the export's rows and counts). Its one
    config is named after the data file's content (``digest``): ``datasets`` caches a folder's build by
    config name, so a fixed name ("default") returned the previous export's rows after a re-export into
    the folder, or into another folder of the same name (or failed on their sizes in a new process)."""
    envs = Counter(r.env or "?" for r in records)
    agents = Counter(r.agent or "?" for r in records)
    library = "verl" if fmt.name == "verl" else "TRL"
    lines = [
        "---",
        "configs:",
        f"- config_name: {config_name(fmt.name, digest)}",
        "  default: true",
        "  data_files:",
        "  - split: train",
        f"    path: {data_file}",
        f"tags: [gymlab, {library.lower()}, {fmt.name}]",
        "---",
        "",
        f"# {data_file}: {fmt.title}",
        "",
        f"Written by gymlab {__version__} on {_dt.datetime.now(_dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}. "
        f"Column names as documented by {library}: {fmt.docs}",
        "",
        "## Source runs",
        "",
        *[f"- {s}" for s in sources],
        f"- environments: {', '.join(f'{k} ({v})' for k, v in envs.items()) or '—'}",
        f"- agents: {', '.join(f'{k} ({v})' for k, v in agents.items()) or '—'}",
        "",
        "## Filters",
        "",
        *[f"- `{k}`: {json.dumps(v)}" for k, v in options.items()],
        "",
        "## Counts",
        "",
        "| what | count |",
        "|---|---|",
        f"| episodes read | {len(records)} |",
        f"| masked episodes among them | {sum(bool(r.mask_sample) for r in records)} |",
        *[f"| {k.replace('_', ' ')} | {v} |" for k, v in built.counts.items()],
        f"| rows written | {len(built.rows)} |",
        "",
        "## Rewards (of the episodes the rows came from)",
        "",
        "| statistic | value |",
        "|---|---|",
        *[f"| {k.replace('_', ' ')} | {_fmt(v)} |" for k, v in rewards.items()],
        "",
        "## Columns",
        "",
        "| column | what |",
        "|---|---|",
        *[f"| `{k}` | {v} |" for k, v in fmt.columns.items()],
        "",
    ]
    return "\n".join(lines)
