"""Benchmark figures for several workers: requests/s with 1 and 4, and the cost of forwarding.

Each server runs as its own process group (``python app.py`` with ``num_workers`` in the config env
var); the client is aiohttp in this process. Throughput: concurrent counter episodes (seed,
increments, verify; most requests land on a worker that does not own their session and are
forwarded) and the stateless example (no routing). Overhead: one session's ``/increment`` sent one at
a time on a keep-alive connection accepted by its owner (handled locally) vs by another worker
(forwarded over the owner's Unix socket).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

WORKER = "x-gymlab-worker"


@contextlib.contextmanager
def _served(entrypoint: Path, workers: int) -> Iterator[str]:
    from gymlab.testing.workers import serve_entrypoint

    with serve_entrypoint(entrypoint, workers) as server:
        yield server.url


def _session(limit: int = 0):
    import aiohttp

    return aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=limit), cookie_jar=aiohttp.DummyCookieJar())


async def _post(s, url: str, path: str, body: dict, jar: dict) -> Any:
    headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in jar.items())} if jar else {}
    async with s.post(url + path, json=body, headers=headers) as r:
        data = await r.read()
        for k, m in r.cookies.items():
            jar[k] = m.value
        if r.status != 200:
            raise RuntimeError(f"POST {path} answered {r.status}: {data[:200]!r}")
        return r, json.loads(data)


async def _counter_throughput(url: str, episodes: int, increments: int, concurrency: int) -> float:
    verify = {"responses_create_params": {"input": "count"}, "response": {"output": []}, "target": increments}
    async with _session() as s:
        sem = asyncio.Semaphore(concurrency)

        async def episode() -> None:
            async with sem:
                jar: dict = {}
                await _post(s, url, "/seed_session", {"initial_count": 0}, jar)
                for _ in range(increments):
                    await _post(s, url, "/increment", {"by": 1}, jar)
                _, result = await _post(s, url, "/verify", verify, jar)
                if result["reward"] != 1.0:
                    raise RuntimeError(f"a counter episode was misgraded: {result}")

        await asyncio.gather(*(episode() for _ in range(concurrency)))  # warm-up
        t = time.perf_counter()
        await asyncio.gather(*(episode() for _ in range(episodes)))
        return episodes * (increments + 2) / (time.perf_counter() - t)


async def _stateless_throughput(url: str, requests: int, concurrency: int) -> float:
    async with _session() as s:
        sem = asyncio.Semaphore(concurrency)

        async def one() -> None:
            async with sem:
                await _post(s, url, "/reverse", {"text": "gymlab"}, {})

        await asyncio.gather(*(one() for _ in range(concurrency)))
        t = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(requests)))
        return requests / (time.perf_counter() - t)


async def _latencies(s, url: str, jar: dict, k: int) -> tuple[list[float], set[str]]:
    times, answered_by = [], set()
    for _ in range(k):
        t = time.perf_counter()
        r, _ = await _post(s, url, "/increment", {"by": 1}, jar)
        times.append(time.perf_counter() - t)
        answered_by.add(r.headers.get(WORKER, ""))
    return times, answered_by


async def _forwarding(url: str, k: int) -> dict[str, float]:
    """Median /increment latency for one session: on its owner's connection vs another worker's."""
    owner_conn = _session(limit=1)
    jar: dict = {}
    r, _ = await _post(owner_conn, url, "/seed_session", {"initial_count": 0}, jar)
    owner = r.headers[WORKER]
    other = None
    for _ in range(100):  # a connection some other worker accepted
        candidate = _session(limit=1)
        r, _ = await _post(candidate, url, "/seed_session", {"initial_count": 0}, {})
        if r.headers[WORKER] != owner:
            other = candidate
            break
        await candidate.close()
    try:
        if other is None:
            raise RuntimeError("every connection reached the same worker")
        await _latencies(owner_conn, url, jar, 20)
        await _latencies(other, url, jar, 20)
        local, by_local = await _latencies(owner_conn, url, jar, k)
        forwarded, by_fwd = await _latencies(other, url, jar, k)
        if by_local != {owner} or by_fwd != {owner}:
            raise RuntimeError(f"the session was not answered by its owner {owner}: {by_local} {by_fwd}")
        return {"local": statistics.median(local), "forwarded": statistics.median(forwarded)}
    finally:
        await owner_conn.close()
        if other is not None:
            await other.close()


async def _one_worker_latency(url: str, k: int) -> float:
    async with _session(limit=1) as s:
        jar: dict = {}
        await _post(s, url, "/seed_session", {"initial_count": 0}, jar)
        await _latencies(s, url, jar, 20)
        times, _ = await _latencies(s, url, jar, k)
        return statistics.median(times)


def workers_benchmark(quick: bool = False) -> dict[str, Any]:
    from gymlab.examples import environment_dir

    counter, stateless = environment_dir("counter") / "app.py", environment_dir("stateless") / "app.py"
    episodes, requests, k, concurrency = (100, 1000, 100, 32) if quick else (600, 6000, 1000, 64)
    out: dict[str, Any] = {}
    for workers in (1, 4):
        with _served(counter, workers) as url:
            rate = asyncio.run(_counter_throughput(url, episodes, 3, concurrency))
            out[f"counter req/s, {workers} worker{'s' * (workers > 1)}, {concurrency} episodes at once"] = round(rate)
            if workers == 1:
                one = asyncio.run(_one_worker_latency(url, k))
            else:
                lat = asyncio.run(_forwarding(url, k))
        with _served(stateless, workers) as url:
            rate = asyncio.run(_stateless_throughput(url, requests, concurrency))
            out[f"stateless req/s, {workers} worker{'s' * (workers > 1)} (no routing)"] = round(rate)
    out["/increment median, 1 worker (no routing layer) (ms)"] = round(one * 1000, 3)
    out["/increment median, 4 workers, at its owner (ms)"] = round(lat["local"] * 1000, 3)
    out["/increment median, 4 workers, forwarded (ms)"] = round(lat["forwarded"] * 1000, 3)
    out["forwarding overhead (ms)"] = round((lat["forwarded"] - lat["local"]) * 1000, 3)
    return out
