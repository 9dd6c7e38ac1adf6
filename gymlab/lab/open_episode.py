"""``lab.episode(target, row)``: the episode a handle, an agent handle or a pinned Ray cell stands for."""

from __future__ import annotations

from typing import Any

from gymlab.errors import EpisodeError
from gymlab.lab.handles import AgentHandle, ServerHandle, is_pool


def _protocol_of(server: Any, agent: Any) -> str:
    """'seed/verify' or 'gymnasium', from the environment's routes (or the agent's kind if it is remote)."""
    if server is not None:
        paths = {getattr(r, "path", None) for r in server.app.routes}
        if "/seed_session" in paths and "/verify" in paths:
            return "seed/verify"
        if "/reset" in paths and "/step" in paths:
            return "gymnasium"
        raise EpisodeError(
            f"{server.name}: serves neither /seed_session+/verify nor /reset+/step; "
            "lab.episode needs a resources server (SimpleResourcesServer or GymnasiumServer)"
        )
    return "gymnasium" if "gymnasium" in type(agent).__name__.lower() else "seed/verify"


def open_episode(lab: Any, target: Any, row: dict[str, Any], *, model: Any = None, max_steps: int | None = None):
    """The episode ``Lab.episode`` returns: ``target`` is a resources server handle or an agent handle."""
    from gymlab.lab.gymnasium_episode import GymnasiumEpisode
    from gymlab.lab.seed_verify import SeedVerifyEpisode

    if is_pool(target):
        from gymlab.cluster.bridge import pinned

        at = pinned(target)
        env_url, protocol, server = at["env_url"], at["protocol"], None
        env_name, model_name, agent_name = at["env_name"], at["model_name"], at["agent_name"]
        model_url = model.url if hasattr(model, "url") else model or at["model_url"]
        max_steps = max_steps if max_steps is not None else at["max_steps"]
    else:
        by_url = {h.url: h for h in lab.servers.values()}
        agent, agent_name = None, ""
        if isinstance(target, AgentHandle):
            agent, agent_name = target.server, target.name
            env_url = getattr(agent, "resources_server", "")
            if not env_url:
                raise EpisodeError(f"{target.name}: the agent has no resources_server; serve it with resources=...")
            model = model if model is not None else (getattr(agent, "model_server", "") or None)
            if max_steps is None:
                max_steps = getattr(agent, "max_steps", None)
            env_handle = by_url.get(env_url)
        elif isinstance(target, ServerHandle):
            env_url, env_handle = target.url, target
        else:
            raise TypeError(
                f"lab.episode takes a server handle or an agent handle (from lab.serve / lab.serve_agent), "
                f"not {type(target).__name__}"
            )
        if isinstance(model, str):
            model_url, model_name = model, getattr(by_url.get(model), "name", model)
        else:
            model_url, model_name = getattr(model, "url", None), getattr(model, "name", "")
        server = env_handle.server if env_handle is not None else None
        env_name = env_handle.name if env_handle else env_url
        protocol = _protocol_of(server, agent)
    cls = SeedVerifyEpisode if protocol == "seed/verify" else GymnasiumEpisode
    return cls(
        env_url,
        row,
        env_name=env_name,
        model_url=model_url,
        model_name=model_name,
        agent_name=agent_name,
        env_server=server,
        max_steps=max_steps,
    )
