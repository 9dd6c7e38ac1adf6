"""One batch of HFModel's rows generated in the worker thread: left-padded, one ``generate`` call per sampling
setting; each row stops on its own (end of turn, its token budget, its deadline, its caller gone), and the
sampled tokens' log-probabilities are read from the raw logits."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from gymlab.models.hf_batch import Row


def generate_rows(
    model: Any, eos: set[int], pad: int, rows: list[Row], stop: threading.Event, done: Callable[[Row], None]
) -> None:
    """Generate ``rows`` (in the worker thread): one ``generate`` call per sampling setting among them;
    ``done(row)`` as soon as a row has stopped, while the others go on."""
    groups: dict[tuple, list[Row]] = {}
    for row in rows:
        groups.setdefault(row.sampling, []).append(row)
    for (sample, temperature, top_p), group in groups.items():
        _generate(model, eos, pad, group, stop, done, sample, temperature, top_p)


def _generate(model, eos, pad, rows, stop, done, sample, temperature, top_p) -> None:
    import torch
    from transformers import (
        GenerationConfig,
        LogitsProcessor,
        LogitsProcessorList,
        StoppingCriteria,
        StoppingCriteriaList,
        TemperatureLogitsWarper,
        TopPLogitsWarper,
    )

    width = max(len(r.prompt) for r in rows)
    ids = torch.tensor([[pad] * (width - len(r.prompt)) + r.prompt for r in rows])
    mask = torch.tensor([[0] * (width - len(r.prompt)) + [1] * len(r.prompt) for r in rows])
    steps: list[Any] = []  # per token: the sampled tokens' raw log-probabilities, one per row
    ended = [False] * len(rows)
    raw: list[Any] = [None]

    class Raw(LogitsProcessor):
        """First in the list: the model's own distribution, before temperature and top_p."""

        def __call__(self, input_ids, scores):
            raw[0] = torch.log_softmax(scores.float(), dim=-1)
            return scores

    def end(i: int, input_ids: Any, why: str) -> None:
        row, n = rows[i], input_ids.shape[1] - width
        row.tokens = input_ids[i, width:].tolist()
        row.logprobs = [float(step[i]) for step in steps[:n]]
        row.finish, ended[i] = why, True
        done(row)

    class Each(StoppingCriteria):
        """After each token: its log-probability, and which rows are done (answered now; the others go on)."""

        def __call__(self, input_ids, scores, **kwargs):
            token = input_ids[:, -1]
            steps.append(raw[0].gather(1, token[:, None]).squeeze(1))
            n, now, stopped = input_ids.shape[1] - width, time.monotonic(), stop.is_set()
            for i, row in enumerate(rows):
                if ended[i]:
                    continue
                if int(token[i]) in eos:
                    end(i, input_ids, "stop")
                elif row.cancelled or stopped:
                    end(i, input_ids, "cancelled")
                elif now >= row.deadline:
                    end(i, input_ids, "timeout")
                elif n >= row.max_new:
                    end(i, input_ids, "length")
            return torch.tensor(ended, device=input_ids.device)

    processors = [Raw()]
    if sample and temperature != 1.0:
        processors.append(TemperatureLogitsWarper(temperature))
    if sample and top_p < 1.0:
        processors.append(TopPLogitsWarper(top_p))
    config = GenerationConfig(
        max_new_tokens=max(r.max_new for r in rows),
        do_sample=sample,
        top_k=0 if sample else None,  # no top-k unless asked (a model's generation_config may default to 50)
        pad_token_id=pad,
        eos_token_id=sorted(eos),
    )
    device = next(model.parameters()).device
    with torch.inference_mode():
        out = model.generate(
            input_ids=ids.to(device),
            attention_mask=mask.to(device),
            generation_config=config,
            logits_processor=LogitsProcessorList(processors),
            stopping_criteria=StoppingCriteriaList([Each()]),
        )
    for i in range(len(rows)):
        if not ended[i]:  # generate stopped before its last criterion call (never expected)
            end(i, out, "length")
