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
from gymlab.errors import ConfigError
from gymlab.probes.candidates import RowIndex
from gymlab.probes.policies import BUILTIN_PROBES, VARIANT_KEY, runs
from gymlab.probes.report import REAL, ProbeReport
from gymlab.registry import agent_class
from gymlab.resources.gymnasium import GymnasiumServer


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
    """Run every probe policy over ``rows`` against ``env`` (a server or agent handle) and report which ones earn
    reward or are masked more than ``real_policy``'s episodes (the arguments: docs/probes.md)."""
    chosen = _chosen(probes)
    rows = list(rows)
    if not rows:
        raise ValueError("probe needs at least one row")
    kind, base = _agent_kind(env, agent, agent_config)
    policies = dict(chosen)
    if real_policy is not None:
        policies[REAL] = real_policy
    served: dict[str, tuple[Any, Any]] = {}
    jobs: dict[str, tuple[Any, list[dict[str, Any]]]] = {}  # run name -> (agent, its rows)
    owners: dict[str, str] = {}  # run name -> probe name
    index, limit = RowIndex(rows), _step_limit(env, kind, base)
    try:
        for name, policy in policies.items():
            label = "probe-real" if name == REAL else f"probe-{name}"
            if name != REAL:
                policy = _bound(policy, index, limit)
            model = lab.serve_model(policy, name=f"{label}-model") if callable(policy) else None
            served[name] = (lab.serve_agent(kind, model=model or policy, name=f"{label}-agent", **base), model)
            for run, variant in runs(name, policy) if name != REAL else [(REAL, None)]:
                jobs[run] = (served[name][0], rows if variant is None else _with_variant(rows, variant))
                owners[run] = name
        if real_policy is None and _is_agent(env):
            jobs[REAL] = (env, rows)
        runs_at_once = (
            lab.arun_many(*job, repeats=repeats, concurrency=concurrency, progress=progress) for job in jobs.values()
        )
        done = dict(zip(jobs, run_sync(_gather(runs_at_once))))
    finally:
        _stop([h for name, pair in served.items() for h in pair if h is not None and h is not env])
    real = done.pop(REAL, None)
    run_policies = {run: chosen[owners[run]] for run in done}  # the real run was popped
    return ProbeReport(done, real=real, rows=rows, threshold=threshold, policies=run_policies)


async def _gather(coroutines: Iterable[Any]) -> list[Any]:
    return await asyncio.gather(*coroutines)


def _bound(policy: Callable, index: dict[str, list[dict[str, Any]]], limit: int | None) -> Callable:
    """``policy`` with the rows (a ``rows`` parameter) and the step limit (``max_steps``) it asks for."""
    try:
        params = set(inspect.signature(policy).parameters)
    except (TypeError, ValueError):  # a builtin or C callable: no signature to read
        params = set()
    extra = {key: value for key, value in (("rows", index), ("max_steps", limit)) if key in params}
    return functools.partial(policy, **extra) if extra else policy


def _with_variant(rows: list[dict[str, Any]], variant: str) -> list[dict[str, Any]]:
    """The rows with ``variant`` in their request's metadata, where a probe with variants reads it."""
    out = []
    for row in rows:
        params = row.get("responses_create_params")
        if isinstance(params, dict) and isinstance(params.get("metadata") or {}, dict):
            params = {**params, "metadata": {**(params.get("metadata") or {}), VARIANT_KEY: variant}}
            row = {**row, "responses_create_params": params}
        out.append(row)  # a malformed row as it came: the run's check names what is wrong with it
    return out


def _step_limit(env: Any, kind: Any, base: dict[str, Any]) -> int | None:
    """The model calls an episode of the probes' agent may make (None: no limit)."""
    if "max_steps" in base:
        return base["max_steps"]
    if _is_agent(env):
        return getattr(env.server, "max_steps", None)
    try:
        cls = agent_class(kind) if isinstance(kind, str) else kind
    except ConfigError:  # serve_agent names the unknown agent
        return None
    return getattr(getattr(cls, "model_fields", {}).get("max_steps"), "default", None)


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
    server = getattr(env, "server", None)
    if server is None:
        raise TypeError(
            f"probe: env is a server handle (lab.serve) or an agent handle (lab.serve_agent), not "
            f"{type(env).__name__}; for a server at a URL pass agent='simple_agent' or 'gymnasium_agent'"
        )
    kind = "gymnasium_agent" if isinstance(server, GymnasiumServer) else "simple_agent"
    return kind, {"resources": env, **config}
