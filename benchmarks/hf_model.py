"""Benchmark figures for hf_model (a transformers causal LM served in this process): one request alone,
then 8 and 16 at once, wall and CPU time, each beside its ceiling (twice one request alone).

The model is ``gymlab.train.tiny``'s random-init Qwen2, greedy, each answer at most ``TOKENS`` tokens (the
tokens generated are printed beside each figure). Generation runs on one torch thread; the client is
``httpx`` in this process.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from typing import Any

TOKENS = 64


async def _ask(http, n: int) -> list[int]:
    answers = await asyncio.gather(
        *(
            http.post("/v1/responses", json={"input": f"hello {i}", "temperature": 0, "max_output_tokens": TOKENS})
            for i in range(n)
        )
    )
    for answer in answers:
        answer.raise_for_status()
    return [a.json()["usage"]["output_tokens"] for a in answers]


def _timed(url: str, n: int, reps: int) -> tuple[float, float, int]:
    """Median wall and CPU seconds of ``n`` requests at once, over ``reps`` runs; the tokens generated."""
    import httpx

    async def run() -> tuple[list[float], list[float], int]:
        walls, cpus, tokens = [], [], 0
        async with httpx.AsyncClient(base_url=url, timeout=600) as http:
            await _ask(http, n)  # warm-up
            for _ in range(reps):
                w, c = time.perf_counter(), time.process_time()
                tokens = sum(await _ask(http, n))
                walls.append(time.perf_counter() - w)
                cpus.append(time.process_time() - c)
        return walls, cpus, tokens

    walls, cpus, tokens = asyncio.run(run())
    return statistics.median(walls), statistics.median(cpus), tokens


def hf_model_benchmark(quick: bool = False) -> dict[str, Any]:
    from gymlab import Lab

    try:
        import transformers  # noqa: F401

        from gymlab.train.tiny import tiny_chat_model
    except ImportError as exc:
        return {"skipped": f"needs the train extra ({exc}): pip install 'gymlab[train]'"}
    reps = 3 if quick else 7
    model, tokenizer = tiny_chat_model(seed=0)
    out: dict[str, Any] = {}
    with Lab() as lab:
        handle = lab.serve_model(hf=model, tokenizer=tokenizer, threads=1, batch_window_ms=5, max_batch=16)
        one_wall, one_cpu, one_tokens = _timed(handle.url, 1, reps)
        out[f"1 request alone, {one_tokens} tokens: wall / CPU (ms)"] = f"{one_wall * 1000:.0f} / {one_cpu * 1000:.0f}"
        for n in (8, 16):
            before = handle.server.batches
            wall, cpu, tokens = _timed(handle.url, n, reps)
            batches = (handle.server.batches - before) / (reps + 1)
            out[f"{n} at once, {tokens} tokens: wall / CPU (ms)"] = f"{wall * 1000:.0f} / {cpu * 1000:.0f}"
            out[f"{n} at once: wall / one alone (ceiling 2.0x)"] = f"{wall / one_wall:.2f}x"
            out[f"{n} at once: batches per round"] = round(batches, 2)
    return out
