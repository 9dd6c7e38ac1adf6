"""``probe(lab, env, rows)``: each adversarial policy served as a model of the Lab, on an agent of the
same kind and config as a real run, so the same budgets, limits and masking apply; then the verdict.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from gymlab._sync import run_sync
from gymlab.probes.candidates import index_rows
from gymlab.probes.policies import BUILTIN_PROBES
from gymlab.probes.report import REAL, ProbeReport


def probe(
    lab: Any,
    env: Any,
    rows: Iterable[dict[str, Any]],
    *,
    probes: dict[str, Callable] | Iterable[str] | None = None,
    real_policy: Any = None,
    threshold: float = 0.0,
    repeats: int = 1,
    agent: str | type | None = None,
    concurrency: int = 16,
    progress: bool = False,
    **agent_config: Any,
) -> ProbeReport:
    """Run every probe policy over ``rows`` against ``env`` and report which ones earn reward.

    ``env``: a server handle (run on ``agent``, by default simple_agent, or gymnasium_agent for a
    Gymnasium server) or an agent handle (each probe runs on a copy of it). ``probes``: name -> policy
    (default ``BUILTIN_PROBES``) or built-in names; a policy with a ``rows`` parameter gets the rows.
    ``real_policy``: a policy or model server whose reward is shown beside each probe's (an agent
    handle's own model by default). A probe is flagged when its mean reward is above ``threshold`` or
    its episodes are masked more often than the real policy's. ``agent_config`` goes to every agent.
    """
    chosen = _chosen(probes)
    rows = list(rows)
    if not rows:
        raise ValueError("probe needs at least one row")
    kind, base = _agent_kind(env, agent, agent_config)
    runs = dict(chosen)
    if real_policy is not None:
        runs[REAL] = real_policy
    served: dict[str, tuple[Any, Any]] = {}
    index = index_rows(rows)
    try:
        for name, policy in runs.items():
            label = "probe-real" if name == REAL else f"probe-{name}"
            if name != REAL and _reads_rows(policy):
                policy = functools.partial(policy, rows=index)  # an answer-aware probe reads the rows
            model = lab.serve_model(policy, name=f"{label}-model") if callable(policy) else None
            served[name] = (lab.serve_agent(kind, model=model or policy, name=f"{label}-agent", **base), model)
        if real_policy is None and _is_agent(env):
            served[REAL] = (env, None)
        done = run_sync(_run_all(lab, served, rows, repeats, concurrency, progress))
    finally:
        _stop([h for name, pair in served.items() for h in pair if h is not None and h is not env])
    real = done.pop(REAL, None)
    return ProbeReport(done, real=real, rows=rows, threshold=threshold, policies=chosen)


async def _run_all(lab, served, rows, repeats, concurrency, progress) -> dict[str, Any]:
    """Every probe's rows at once (``concurrency`` episodes at a time for each probe)."""
    names = list(served)
    results = await asyncio.gather(
        *(lab.arun_many(served[n][0], rows, repeats=repeats, concurrency=concurrency, progress=progress) for n in names)
    )
    return dict(zip(names, results))


def _stop(handles: list[Any]) -> None:
    """Stop the probes' servers side by side (each waits for its uvicorn loop to wind down)."""
    if handles:
        with ThreadPoolExecutor(len(handles)) as pool:
            list(pool.map(lambda h: h.stop(), handles))


def _chosen(probes: Any) -> dict[str, Callable]:
    if probes is None:
        return dict(BUILTIN_PROBES)
    if isinstance(probes, dict):
        chosen = dict(probes)
    else:
        names = list(probes)
        unknown = [n for n in names if n not in BUILTIN_PROBES]
        if unknown:
            raise ValueError(
                f"unknown probe {unknown[0]!r}; built-in probes: {', '.join(BUILTIN_PROBES)} "
                "(pass probes={name: policy} for your own)"
            )
        chosen = {n: BUILTIN_PROBES[n] for n in names}
    for name, policy in chosen.items():
        if name == REAL:
            raise ValueError(f"{REAL!r} names the real policy's run; give the probe another name")
        if not callable(policy):
            raise TypeError(f"probe {name!r}: a probe is a policy function (request -> answer), not {policy!r}")
    if not chosen:
        raise ValueError("no probes to run")
    return chosen


def _reads_rows(policy: Callable) -> bool:
    try:
        return "rows" in inspect.signature(policy).parameters
    except (TypeError, ValueError):  # a builtin or C callable: no signature to read
        return False


def _is_agent(target: Any) -> bool:
    return hasattr(target, "arun") and hasattr(target, "server")


def _agent_kind(env: Any, agent: Any, config: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """The agent class (or registry name) every probe runs on, and its config without a model."""
    if _is_agent(env):
        if agent is not None:
            raise TypeError("probe: env is already an agent handle; pass agent= only with a resources server")
        own = env.server.model_dump(exclude={"name", "port", "session_secret", "model_server"})
        return type(env.server), {**own, **config}
    if agent is not None:
        return agent, {"resources": env, **config}
    from gymlab.resources.gymnasium import GymnasiumServer

    server = getattr(env, "server", None)
    if server is None:
        raise TypeError(
            f"probe: env is a server handle (lab.serve) or an agent handle (lab.serve_agent), not "
            f"{type(env).__name__}; for a server at a URL pass agent='simple_agent' or 'gymnasium_agent'"
        )
    kind = "gymnasium_agent" if isinstance(server, GymnasiumServer) else "simple_agent"
    return kind, {"resources": env, **config}
