"""Lab: start servers in background threads of this process and run episodes against them."""

from __future__ import annotations

import atexit
import weakref
from collections.abc import Callable
from typing import Any

from gymlab._runtime.serve import ThreadedServer
from gymlab._sync import on_background_loop, run_sync
from gymlab.client import post_ok
from gymlab.errors import ServerStartError
from gymlab.protocol import Rollout
from gymlab.server import BaseServer


class ServerHandle:
    """A running server: ``.url``, ``.server`` (the instance), ``.stop()``; a context manager."""

    def __init__(self, server: BaseServer, runner: ThreadedServer, lab: Lab | None = None):
        self.server, self._runner, self._lab = server, runner, lab

    @property
    def name(self) -> str:
        return self.server.name

    @property
    def url(self) -> str:
        return self._runner.url

    @property
    def running(self) -> bool:
        return self._runner.thread.is_alive()

    def stop(self) -> None:
        self._runner.stop()
        if self._lab is not None and self._lab._handles.get(self.name) is self:
            del self._lab._handles[self.name]

    async def apost(self, path: str, body: Any) -> Any:
        return await on_background_loop(post_ok(self.url, path, body, server=self.name))

    def post(self, path: str, body: Any) -> Any:
        """POST JSON to this server from sync code; an error status raises ``ServerError``."""
        return run_sync(self.apost(path, body))

    def __enter__(self) -> ServerHandle:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<{type(self).__name__} {self.name} {self.url} {state}>"


class AgentHandle(ServerHandle):
    """A running agent server: ``run(row)`` and ``await arun(row)`` return a ``Rollout``."""

    async def arun(self, row: dict[str, Any]) -> Rollout:
        return Rollout.model_validate(await self.apost("/run", row))

    def run(self, row: dict[str, Any]) -> Rollout:
        return run_sync(self.arun(row))


_labs: weakref.WeakSet[Lab] = weakref.WeakSet()


class Lab:
    """Servers in background threads of the current process (a kernel, a script, a test).

    >>> lab = Lab()
    >>> env = lab.serve(CalculatorServer)
    >>> model = lab.serve_model(calculator_policy)
    >>> agent = lab.serve_agent("simple_agent", resources=env, model=model)
    >>> agent.run(row).reward
    1.0

    Serving again under a name that is running replaces that server (re-running a cell).
    """

    def __init__(self, log_level: str = "warning"):
        self.log_level = log_level
        self._handles: dict[str, ServerHandle] = {}
        _labs.add(self)

    @property
    def servers(self) -> dict[str, ServerHandle]:
        return dict(self._handles)

    def serve(
        self,
        server: type[BaseServer] | BaseServer,
        *,
        name: str | None = None,
        handle_cls: type[ServerHandle] = ServerHandle,
        **config: Any,
    ) -> ServerHandle:
        """Start ``server`` (a class, built with ``config``, or an instance) in a background thread."""
        if isinstance(server, type):
            if name:
                config["name"] = name
            instance = server(**config)
        else:
            if config:
                raise TypeError("config keywords apply to a server class; an instance already has its config")
            instance = server
            if name:
                instance.name = name
        if instance.num_workers > 1:
            raise ServerStartError(
                f"{instance.name}: num_workers={instance.num_workers}, but a Lab serves in threads of this "
                "process (one worker); run several workers with `gymlab serve CONFIG` and point handles at its URL"
            )
        old = self._handles.pop(instance.name, None)
        if old is not None:
            old._runner.stop()
        runner = ThreadedServer(instance.app, instance.host, instance.port, instance.name, self.log_level).start()
        handle = handle_cls(instance, runner, self)
        self._handles[instance.name] = handle
        return handle

    def serve_model(
        self,
        policy: Callable | None = None,
        *,
        name: str | None = None,
        openai: dict[str, Any] | None = None,
        **config: Any,
    ) -> ServerHandle:
        """Start a model server: a ``PolicyModel`` over ``policy(request)``, or with
        ``openai=dict(base_url=..., model=..., api_key_env=..., mode=...)`` an ``OpenAIModel`` proxy."""
        if openai is not None:
            if policy is not None:
                raise TypeError("serve_model takes a policy or openai=..., not both")
            from gymlab.models.openai import OpenAIModel

            return self.serve(OpenAIModel, name=name or "openai_model", **{**openai, **config})
        from gymlab.models.policy import PolicyModel

        return self.serve(PolicyModel, name=name or "policy_model", policy=policy, **config)

    def serve_agent(
        self,
        agent: str | type[BaseServer] = "simple_agent",
        *,
        resources: Any = None,
        model: Any = None,
        name: str | None = None,
        **config: Any,
    ) -> AgentHandle:
        """Start an agent server bound to ``resources`` and ``model`` (handles or URLs)."""
        from gymlab.registry import agent_class

        cls = agent_class(agent) if isinstance(agent, str) else agent
        if resources is not None:
            config["resources_server"] = _url(resources)
        if model is not None:
            config["model_server"] = _url(model)
        return self.serve(
            cls, name=name or (agent if isinstance(agent, str) else None), handle_cls=AgentHandle, **config
        )

    def episode(self, target: ServerHandle, row: dict[str, Any], *, model: Any = None, max_steps: int | None = None):
        """An interactive episode of ``row`` against a resources server or an agent's environment.

        ``model`` (a handle or URL) answers ``model_turn``/``step()``; an agent handle brings its own.
        """
        return open_episode(self, target, row, model=model, max_steps=max_steps)

    def run_many(
        self,
        agent: AgentHandle,
        rows: list[dict[str, Any]],
        *,
        repeats: int = 1,
        concurrency: int = 16,
        on_error: str = "record",
        progress: bool = False,
    ):
        """Run every row ``repeats`` times ("aabbcc" order) through ``agent``; returns ``Rollouts``."""
        return run_sync(
            self.arun_many(agent, rows, repeats=repeats, concurrency=concurrency, on_error=on_error, progress=progress)
        )

    async def arun_many(
        self,
        agent: AgentHandle,
        rows: list[dict[str, Any]],
        *,
        repeats: int = 1,
        concurrency: int = 16,
        on_error: str = "record",
        progress: bool = False,
    ):
        from gymlab.lab.runs import arun_many, env_name_of

        return await arun_many(
            agent,
            rows,
            repeats=repeats,
            concurrency=concurrency,
            env_name=env_name_of(self, agent),
            on_error=on_error,
            progress=progress,
        )

    def probe(self, env: Any, rows: list[dict[str, Any]], **kw: Any):
        """Run the reward probes over ``rows`` against ``env``; see ``gymlab.probes.probe``."""
        from gymlab.probes.run import probe

        return probe(self, env, rows, **kw)

    def close(self) -> None:
        """Stop every server this lab started."""
        for handle in list(self._handles.values()):
            handle._runner.stop()
        self._handles.clear()

    def __enter__(self) -> Lab:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Lab {', '.join(f'{n}={h.url}' for n, h in self._handles.items()) or 'no servers'}>"


def _url(target: Any) -> str:
    return target if isinstance(target, str) else target.url


@atexit.register
def _close_all() -> None:
    for lab in list(_labs):
        lab.close()


# -- lab.episode ----------------------------------------------------------------------------------


def _protocol_of(server: Any, agent: Any) -> str:
    """'seed/verify' or 'gymnasium', from the environment's routes (or the agent's kind if it is remote)."""
    from gymlab.errors import EpisodeError

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
    from gymlab.errors import EpisodeError
    from gymlab.lab.gymnasium_episode import GymnasiumEpisode
    from gymlab.lab.seed_verify import SeedVerifyEpisode

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
    elif model is not None:
        model_url, model_name = model.url, model.name
    else:
        model_url, model_name = None, ""
    server = env_handle.server if env_handle is not None else None
    protocol = _protocol_of(server, agent)
    cls = SeedVerifyEpisode if protocol == "seed/verify" else GymnasiumEpisode
    return cls(
        env_url,
        row,
        env_name=env_handle.name if env_handle else env_url,
        model_url=model_url,
        model_name=model_name,
        agent_name=agent_name,
        env_server=server,
        max_steps=max_steps,
    )
