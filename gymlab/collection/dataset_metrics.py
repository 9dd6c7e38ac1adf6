"""Dataset metrics: what a rows file holds, counting custom rows that carry no Responses fields."""

from __future__ import annotations

import os
import statistics
from collections import Counter
from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from gymlab.jsonl import iter_jsonl
from gymlab.protocol import ResponseCreateParams


def dataset_metrics(rows: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Counts over ``rows``: all rows, their fields, and response figures where the params validate."""
    n_rows, fields, invalid, missing = 0, Counter(), 0, 0
    items, tools, settings = [], Counter(), Counter()
    for row in rows:
        n_rows += 1
        fields.update(k for k in row if k != "responses_create_params")
        raw = row.get("responses_create_params")
        if raw is None:
            missing += 1
            continue
        try:
            params = ResponseCreateParams.model_validate(raw)
        except ValidationError:
            invalid += 1
            continue
        items.append(len(params.input_items()))
        tools.update(t.name for t in params.tools or ())
        settings.update(k for k in ("temperature", "top_p", "max_output_tokens", "seed") if raw.get(k) is not None)
    metrics: dict[str, Any] = {
        "num_rows": n_rows,
        "fields": dict(sorted(fields.items())),
        "num_rows_with_responses_create_params": len(items),
        "num_rows_without_responses_create_params": missing,
        "num_rows_with_invalid_responses_create_params": invalid,
    }
    if items:
        metrics["responses"] = {
            "input_items": {"min": min(items), "mean": statistics.fmean(items), "max": max(items)},
            "tools": dict(sorted(tools.items())),
            "sampling_settings": dict(sorted(settings.items())),
        }
    return metrics


def file_metrics(path: str | os.PathLike) -> dict[str, Any]:
    """``dataset_metrics`` of a JSONL file (a bad line is a ``DatasetError`` naming it)."""
    return dataset_metrics(row for _, row in iter_jsonl(path))


__all__ = ["dataset_metrics", "file_metrics"]
