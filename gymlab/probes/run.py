"""``probe(lab, env, rows)``: run adversarial policies through the normal agent path, then judge the reward.

Each probe policy is served as a model server of the Lab, bound to an agent of the same kind and
config as a real run (simple_agent for a seed/verify server, gymnasium_agent for a Gymnasium server,
or a copy of the agent handle you pass, e.g. an agent-embedded environment), and the rows go through
``lab.run_many``: the same time budgets, step limit, tool guard and masking as any run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from gymlab.probes.policies import BUILTIN_PROBES
from gymlab.probes.report import ProbeReport


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

    ``env``: a resources server handle (``lab.serve(...)``; served with ``agent``, by default
    simple_agent or, for a Gymnasium server, gymnasium_agent) or an agent handle (``lab.serve_agent``:
    each probe runs on a copy of that agent, with its config, bound to the probe's model).
    ``probes``: name -> policy (default ``BUILTIN_PROBES``; extend with ``{**BUILTIN_PROBES, "mine": fn}``)
    or a list of built-in names. ``real_policy``: a policy function or a model server (handle or URL)
    whose reward is shown beside each probe's; for an agent handle, by default the agent's own model.
    An episode *beats* ``threshold`` when its reward is above it; a probe is flagged on a task when
    its mean reward there is above it. ``agent_config`` goes to every agent (``max_steps=8``,
    ``timeouts={"model": 30}``, ...).
    """
    chosen = _chosen(probes)
    rows = list(rows)
    if not rows:
        raise ValueError("probe needs at least one row")
    kind, base = _agent_kind(env, agent, agent_config)
    results = {}
    for name, policy in chosen.items():
        results[name] = _run_one(lab, env, rows, kind, base, f"probe-{name}", policy, repeats, concurrency, progress)
    real = None
    if real_policy is not None:
        real = _run_one(lab, env, rows, kind, base, "probe-real", real_policy, repeats, concurrency, progress)
    elif _is_agent(env):
        real = lab.run_many(env, rows, repeats=repeats, concurrency=concurrency, progress=progress)
    return ProbeReport(results, real=real, rows=rows, threshold=threshold, policies=chosen)


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
    from gymlab.resources.gymnasium import GymnasiumServer

    server = getattr(env, "server", None)
    if server is None:
        raise TypeError(
            f"probe: env is a server handle (lab.serve) or an agent handle (lab.serve_agent), not "
            f"{type(env).__name__}; for a server at a URL pass agent='simple_agent' or 'gymnasium_agent'"
        )
    kind = "gymnasium_agent" if isinstance(server, GymnasiumServer) else "simple_agent"
    return kind, {"resources": env, **config}


def _run_one(lab, env, rows, kind, base, name, policy, repeats, concurrency, progress):
    """Serve ``policy`` (a function, or a model server handle/URL) with its own agent and run the rows."""
    model = lab.serve_model(policy, name=f"{name}-model") if callable(policy) else policy
    agent = lab.serve_agent(kind, model=model, name=f"{name}-agent", **base)
    try:
        return lab.run_many(agent, rows, repeats=repeats, concurrency=concurrency, progress=progress)
    finally:
        agent.stop()
        if callable(policy):
            model.stop()
