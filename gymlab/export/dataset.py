"""Trainer-format datasets: written atomically with a dataset card (and verl's tool config), read back
checked, or handed to ``datasets``; their Arrow schemas (docs/export.md)."""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import fmean, pstdev
from typing import Any

from gymlab._version import __version__
from gymlab.errors import DatasetError, ExportError
from gymlab.export.ground_truth import Inputs, inputs_by_task, sibling_inputs
from gymlab.export.rows import as_records
from gymlab.export.trainers import FORMATS, Built, Format, Options, format_of
from gymlab.jsonl import atomic_file, iter_jsonl, write_atomic, write_jsonl_atomic
from gymlab.protocol import Rollout


def schema(format_name: str, tokens: bool = False):
    """The ``pyarrow.Schema`` of a trainer format's rows; ``tokens``: with the ``token_turns`` column."""
    import pyarrow as pa

    s, f64, i64 = pa.string(), pa.float64(), pa.int64()
    call = pa.struct([("id", s), ("type", s), ("function", pa.struct([("name", s), ("arguments", s)]))])
    message = pa.struct(
        [("role", s), ("content", s), ("reasoning_content", s), ("tool_calls", pa.list_(call)), ("tool_call_id", s)]
    )
    extra = [("index", i64), ("split", s), ("task_index", i64), ("tools", s), ("reward_mean", f64), ("episodes", i64)]
    kinds = {
        **dict.fromkeys(("str", "str?", "tools"), s),
        **dict.fromkeys(("float", "float?"), f64),
        "int": i64,
        "bool": pa.bool_(),
        "messages": pa.list_(message),
        "reward_model": pa.struct([("style", s), ("ground_truth", s)]),
        "extra_info": pa.struct(extra),
    }
    fields = [(name, kinds[kind]) for name, (kind, _) in FORMATS[format_name].columns.items()]
    if tokens:
        turn = [("prompt_token_ids", pa.list_(i64)), ("generation_token_ids", pa.list_(i64))]
        fields = [*fields, ("token_turns", pa.list_(pa.struct([*turn, ("generation_log_probs", pa.list_(f64))])))]
    return pa.schema(fields)


def table(format_name: str, rows: list[dict[str, Any]]):
    """The rows as a ``pyarrow.Table`` of the format's schema."""
    import pyarrow as pa

    tokens = any(row.get("token_turns") for row in rows)
    return pa.Table.from_pylist(rows, schema=schema(format_name, tokens))


def tool_config(rows: list[dict[str, Any]], tool_class: str) -> dict[str, Any] | None:
    """verl's tool config of verl rows (None: no tool); a name with two schemas is an ``ExportError``."""
    schemas: dict[str, dict[str, Any]] = {}
    for i, row in enumerate(rows, 1):
        for declared in json.loads(row["extra_info"]["tools"] or "[]"):
            name = declared["function"]["name"]
            if schemas.setdefault(name, declared) != declared:
                raise ExportError(f"row {i}: tool {name!r} is declared with two different schemas; export them apart")
    if not schemas:
        return None
    return {
        "tools": [
            {"class_name": tool_class, "config": {"type": "native"}, "tool_schema": schemas[name]}
            for name in sorted(schemas)
        ]
    }


def reward_stats(rewards: list[float]) -> dict[str, Any]:
    """Count, mean, standard deviation, min and max (None when there are no rewards)."""
    if not rewards:
        return {"count": 0, **dict.fromkeys(("mean", "std", "min", "max"))}
    mean, std = fmean(rewards), pstdev(rewards)
    return {"count": len(rewards), "mean": mean, "std": std, "min": min(rewards), "max": max(rewards)}


def card_text(
    fmt: Format, path: Path, sources: list[str], records: list[Rollout], options: dict, built: Built, rewards: dict
) -> str:
    """The dataset card's Markdown, YAML front matter first; its one config is named after the data file's
    SHA-256 (``datasets`` caches a build by config name: docs/export.md)."""
    import yaml

    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    library = "verl" if fmt.name == "verl" else "TRL"
    config = {"config_name": f"{fmt.name}-{digest[:16]}", "default": True}
    config["data_files"] = [{"split": "train", "path": path.name}]  # YAML quotes a file name that needs it
    front = yaml.safe_dump({"configs": [config], "tags": ["gymlab", library.lower(), fmt.name]}, sort_keys=False)
    runs = [f"- {s}" for s in sources]
    for what, key in (("environments", "env"), ("agents", "agent")):
        seen = Counter(getattr(r, key) or "?" for r in records)
        runs.append(f"- {what}: {', '.join(f'{k} ({v})' for k, v in seen.items()) or '—'}")
    counts = {
        "episodes read": len(records),
        "masked episodes among them": sum(bool(r.mask_sample) for r in records),
        **{k.replace("_", " "): v for k, v in built.counts.items()},
        "rows written": len(built.rows),
    }
    sections = {
        "Source runs": runs,
        "Filters": [f"- `{k}`: {json.dumps(v)}" for k, v in options.items()],
        "Counts": _table("what | count", counts),
        "Rewards (of the episodes the rows came from)": _table(
            "statistic | value", {k.replace("_", " "): _fmt(v) for k, v in rewards.items()}
        ),
        "Columns": _table("column | what", {f"`{k}`": v for k, (_, v) in fmt.columns.items()}),
    }
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = ["---", front.rstrip(), "---", "", f"# {path.name}: {fmt.title}", ""]
    lines += [f"Written by gymlab {__version__} on {stamp}. Column names as documented by {library}: {fmt.docs}", ""]
    for title, body in sections.items():
        lines += [f"## {title}", "", *body, ""]
    return "\n".join(lines)


def _table(head: str, rows: dict[str, Any]) -> list[str]:
    return [f"| {head} |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows.items())]


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "—" if value is None else str(value)


DEFAULTS = asdict(Options())  # every export option's default


@dataclass(frozen=True)
class ExportResult:
    """What an export wrote: the data file, its card, the row count, the card's counts and rewards."""

    path: Path
    card: Path | None
    format: str
    rows: int
    counts: dict[str, int] = field(default_factory=dict)
    rewards: dict[str, Any] = field(default_factory=dict)
    tool_config: Path | None = None  # verl: the tool config YAML written beside the data file


def _format(name: str) -> Format:
    if name not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {name!r}")
    return FORMATS[name]


def _records(rollouts: Any) -> tuple[list[Rollout], list[str], list[Path]]:
    """Records, where they came from (files, or memory), and the materialized inputs beside the files."""
    if isinstance(rollouts, (str, os.PathLike)):
        rollouts = [rollouts]
    rollouts = list(rollouts)
    if rollouts and all(isinstance(r, (str, os.PathLike)) for r in rollouts):
        read = [as_records(path) for path in rollouts]
        sources = [f"`{path}` ({len(some)} episodes)" for path, some in zip(rollouts, read)]
        inputs = [sibling_inputs(path) for path in rollouts]
        return [r for some in read for r in some], sources, [] if None in inputs else inputs  # every file's, or none
    records = as_records(rollouts)
    return records, [f"in-memory rollouts ({len(records)} episodes)"], []


def _inputs(opts: Options, found: list[Path]) -> Inputs:
    """The dataset rows the default ground truth reads: ``rows=``, else the files' materialized inputs."""
    if opts.ground_truth is not None:
        return Inputs()
    if opts.rows is not None:
        where = f"`{opts.rows}`" if isinstance(opts.rows, (str, os.PathLike)) else "the rows given"
        return inputs_by_task([(where, opts.rows)])
    if found:
        return inputs_by_task([(f"`{p}`", p) for p in found])
    return Inputs()


def build(rollouts: Any, format: str, **options: Any) -> tuple[list[Rollout], list[str], Built, Options]:
    """Read the records and build the format's rows (checked: a bad row is an ``ExportError``)."""
    fmt = _format(format)
    for key, value in options.items():
        if key not in DEFAULTS:
            raise TypeError(f"unknown export option {key!r}; options: {', '.join(DEFAULTS)}")
        if key not in fmt.options and value != DEFAULTS[key]:
            raise ValueError(f"{key} does not apply to {fmt.name}; it takes {', '.join(sorted(fmt.options))}")
    opts = Options(**options)
    records, sources, found = _records(rollouts)
    built = fmt.build(records, opts, _inputs(opts, found) if "rows" in fmt.options else Inputs())
    for i, row in enumerate(built.rows, 1):
        try:
            fmt.check(row)
        except ValueError as exc:
            raise ExportError(
                f"{format} row {i} would not be valid: {exc}; filter such episodes out (drop_masked, min_reward)"
            ) from None
    return records, sources, built, opts


def export_dataset(
    rollouts: Iterable[Rollout | dict] | str | os.PathLike | Iterable[str | os.PathLike],
    path: str | os.PathLike,
    format: str,
    *,
    card: bool = True,
    **options: Any,
) -> ExportResult:
    """Write ``rollouts`` (records, or rollouts JSONL paths) in a trainer ``format`` (one of ``FORMATS``)
    to ``path`` (``.parquet`` or ``.jsonl``) atomically, with ``README.md`` beside it when ``card``.
    ``options``: each format takes those in its ``Format.options`` (docs/export.md lists them)."""
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".parquet", ".jsonl"):
        raise ValueError(f"{path}: the file name must end in .parquet or .jsonl, to say which to write")
    records, sources, built, opts = build(rollouts, format, **options)
    if suffix == ".parquet":
        import pyarrow.parquet as pq

        with atomic_file(path) as f:
            pq.write_table(table(format, built.rows), f)
    else:
        write_jsonl_atomic(path, built.rows)
    tools_path = None
    if format == "verl" and (tools := tool_config(built.rows, opts.tool_class)):
        import yaml

        tools_path = write_atomic(
            path.with_name(path.stem + "_tool_config.yaml"), yaml.safe_dump(tools, sort_keys=False)
        )
    rewards = reward_stats(built.rewards)
    if format == "trl-dpo" and built.rows:
        rewards["mean_chosen"] = fmean(r["score_chosen"] for r in built.rows)
        rewards["mean_rejected"] = fmean(r["score_rejected"] for r in built.rows)
        rewards["mean_margin"] = rewards["mean_chosen"] - rewards["mean_rejected"]
    card_path = None
    if card:
        used = {k: v for k, v in asdict(opts).items() if k in FORMATS[format].options and k != "rows"}
        if built.ground_truth is not None:
            used["ground_truth"] = built.ground_truth
        if tools_path is not None:
            used["tool_config"] = f"{tools_path.name}: verl's multi_turn tool_config_path, class_name {opts.tool_class}"
        elif "tool_class" in used:
            del used["tool_class"]  # no row declares a tool
        text = card_text(FORMATS[format], path, sources, records, used, built, rewards)
        card_path = write_atomic(path.parent / "README.md", text)
    return ExportResult(path, card_path, format, len(built.rows), built.counts, rewards, tools_path)


def read_dataset(path: str | os.PathLike, format: str | None = None) -> list[dict[str, Any]]:
    """Every row of a trainer-format JSONL or Parquet file, checked (``format`` None: told by the columns).
    A torn, invalid or wrong-shaped line or row is a ``DatasetError`` naming the file and the line or row."""
    path = Path(path)
    if format is not None:
        _format(format)
    if path.suffix.lower() == ".parquet":
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            data = pq.read_table(path)
        except OSError as exc:
            raise DatasetError(str(path), None, f"cannot read: {exc.strerror or exc}") from None
        except pa.ArrowException as exc:
            why = f"not a readable Parquet file ({exc}); was the write interrupted? export it again"
            raise DatasetError(str(path), None, why) from None
        names = data.schema.names
        format = format or format_of(set(names))
        if format is None:
            raise DatasetError(str(path), None, f"columns {names} are none of {', '.join(FORMATS)}")
        for want in schema(format):
            if want.name not in names:
                why = f"not a {format} file: no column {want.name!r} (columns: {', '.join(names)})"
                raise DatasetError(str(path), None, why)
            if not (found := data.schema.field(want.name).type).equals(want.type):
                why = f"column {want.name!r} has type {found}, {format} expects {want.type}"
                raise DatasetError(str(path), None, why)
        numbered: Iterable[tuple[str, int | None, Any]] = (
            (f"row {n}: ", None, row) for n, row in enumerate(data.to_pylist(), 1)
        )
    else:
        numbered = (("", n, row) for n, row in iter_jsonl(path))
    rows = []
    for where, line, row in numbered:
        format = format or format_of(set(row))
        if format is None:
            raise DatasetError(str(path), line, f"keys {sorted(row)} are none of {', '.join(FORMATS)}")
        try:
            FORMATS[format].check(row)
        except ValueError as exc:
            raise DatasetError(str(path), line, f"{where}not a {format} row: {exc}") from None
        rows.append(row)
    return rows


def to_hf(rollouts: Any, format: str = "trl-sft", **options: Any):
    """A ``datasets.Dataset`` of the format's rows, typed by its Arrow schema (nothing written)."""
    try:
        import datasets
        from datasets.table import InMemoryTable
    except ImportError:
        raise ExportError(
            "to_hf needs the 'datasets' package, which is not installed: pip install 'gymlab[export]'"
        ) from None
    _, _, built, _ = build(rollouts, format, **options)
    return datasets.Dataset(InMemoryTable(table(format, built.rows)))
