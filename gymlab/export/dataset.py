"""Trainer-format datasets: written with a dataset card, read back checked, or handed to ``datasets``."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gymlab.errors import DatasetError, ExportError
from gymlab.export.arrow import read_parquet, schema, table, write_parquet_atomic
from gymlab.export.card import card_text, file_digest, reward_stats
from gymlab.export.filters import as_records
from gymlab.export.ground_truth import described, inputs_by_task, sibling_inputs
from gymlab.export.trainers import FORMATS, Built, Format, Inputs, Options
from gymlab.export.validate import CHECKS, format_of
from gymlab.export.verl_tools import tool_config, write_tool_config
from gymlab.jsonl import iter_jsonl, write_jsonl_atomic, write_text_atomic
from gymlab.protocol import Rollout

_DEFAULTS = asdict(Options())


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
        records: list[Rollout] = []
        sources, inputs = [], []
        for path in rollouts:
            some = as_records(path)
            records += some
            sources.append(f"`{path}` ({len(some)} episodes)")
            inputs.append(sibling_inputs(path))
        found = [p for p in inputs if p is not None]
        return records, sources, found if len(found) == len(inputs) else []  # every file's inputs, or none
    records = as_records(rollouts)
    return records, [f"in-memory rollouts ({len(records)} episodes)"], []


def _inputs(opts: Options, found: list[Path]) -> Inputs:
    """The dataset rows the default ground truth reads: ``rows=``, else the files' materialized inputs."""
    if opts.ground_truth is not None:
        return Inputs()
    if opts.rows is not None:
        where = f"`{opts.rows}`" if isinstance(opts.rows, (str, os.PathLike)) else "the rows given"
        return Inputs(inputs_by_task([(where, opts.rows)]), [where])
    if found:
        names = [f"`{p}`" for p in found]
        return Inputs(inputs_by_task(list(zip(names, found))), names)
    return Inputs()


def _options(fmt: Format, given: dict[str, Any]) -> Options:
    for key, value in given.items():
        if key not in _DEFAULTS:
            raise TypeError(f"unknown export option {key!r}; options: {', '.join(_DEFAULTS)}")
        if key not in fmt.options and value != _DEFAULTS[key]:
            raise ValueError(f"{key} does not apply to {fmt.name}; it takes {', '.join(sorted(fmt.options))}")
    return Options(**given)


def build(rollouts: Any, format: str, **options: Any) -> tuple[list[Rollout], list[str], Built, Options]:
    """Read the records and build the format's rows (checked: a bad row is an ``ExportError``)."""
    fmt = _format(format)
    opts = _options(fmt, options)
    records, sources, found = _records(rollouts)
    inputs = _inputs(opts, found) if "rows" in fmt.options else None
    built = fmt.build(records, opts, inputs) if inputs is not None else fmt.build(records, opts)
    if inputs is not None:
        built.ground_truth = described(opts.ground_truth, inputs.by_task, inputs.where)
    check = CHECKS[format]
    for i, row in enumerate(built.rows, 1):
        try:
            check(row)
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
        write_parquet_atomic(path, table(format, built.rows))
    else:
        write_jsonl_atomic(path, built.rows)
    tools = tool_config(built.rows, opts.tool_class) if format == "verl" else None
    tools_path = write_tool_config(path, tools) if tools else None
    rewards = reward_stats(built.rewards)
    if format == "trl-dpo" and built.rows:
        n = len(built.rows)
        rewards["mean_chosen"] = sum(r["score_chosen"] for r in built.rows) / n
        rewards["mean_rejected"] = sum(r["score_rejected"] for r in built.rows) / n
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
        card_path = write_text_atomic(
            path.parent / "README.md",
            card_text(
                fmt=FORMATS[format],
                data_file=path.name,
                sources=sources,
                records=records,
                options=used,
                built=built,
                rewards=rewards,
                digest=file_digest(path),
            ),
        )
    return ExportResult(path, card_path, format, len(built.rows), built.counts, rewards, tools_path)


def _check_schema(path: Path, data, format: str) -> None:
    expected = schema(format)
    for name in expected.names:
        if name not in data.schema.names:
            raise DatasetError(
                str(path), None, f"not a {format} file: no column {name!r} (columns: {', '.join(data.schema.names)})"
            )
        found, want = data.schema.field(name).type, expected.field(name).type
        if not found.equals(want):
            raise DatasetError(str(path), None, f"column {name!r} has type {found}, {format} expects {want}")


def read_dataset(path: str | os.PathLike, format: str | None = None) -> list[dict[str, Any]]:
    """Every row of a trainer-format JSONL or Parquet file, checked (``format`` None: told by the columns).
    A torn, invalid or wrong-shaped line or row is a ``DatasetError`` naming the file and the line or row."""
    path = Path(path)
    if format is not None:
        _format(format)
    if path.suffix.lower() == ".parquet":
        data = read_parquet(path)
        format = format or format_of(set(data.schema.names))
        if format is None:
            raise DatasetError(str(path), None, f"columns {data.schema.names} are none of {', '.join(FORMATS)}")
        _check_schema(path, data, format)
        numbered: Iterable[tuple[str | None, int | None, Any]] = (
            (f"row {n}", None, row) for n, row in enumerate(data.to_pylist(), 1)
        )
    else:
        numbered = ((None, n, row) for n, row in iter_jsonl(path))
    rows = []
    for row_label, line, row in numbered:
        if format is None:
            format = format_of(set(row))
            if format is None:
                raise DatasetError(str(path), line, f"keys {sorted(row)} are none of {', '.join(FORMATS)}")
        try:
            missing = [c for c in FORMATS[format].columns if c not in row]
            if missing:
                raise ValueError(f"no {missing[0]!r}")
            CHECKS[format](row)
        except ValueError as exc:
            cause = f"not a {format} row: {exc}"
            raise DatasetError(str(path), line, f"{row_label}: {cause}" if row_label else cause) from None
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
