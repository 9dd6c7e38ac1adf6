"""Lab: start servers in background threads of this process and run episodes against them."""

from __future__ import annotations

import asyncio
import atexit
import sys
import threading
import time
import warnings
import weakref
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

from gymlab._http.client import Client
from gymlab._runtime.serve import LoopServer
from gymlab._sync import background_loop, run_sync
from gymlab._traces import Interrupted, is_user_file, logbook
from gymlab.cluster.cell import protocol_of
from gymlab.errors import ConfigError, EpisodeError, ServerStartError
from gymlab.lab.display import LogView
from gymlab.lab.gymnasium_episode import GymnasiumEpisode
from gymlab.lab.handles import AgentHandle, ServerHandle, is_pool
from gymlab.lab.runs import Rollouts, arun_many
from gymlab.lab.seed_verify import SeedVerifyEpisode
from gymlab.run.engine import RunState
from gymlab.server import BaseServer

_labs: weakref.WeakSet[Lab] = weakref.WeakSet()


class Lab(AbstractContextManager):
    """Servers in background threads of this process; serving a running name again replaces it on the same URL.
    Calls between them go into the target's ASGI app (``wire=True``: over loopback HTTP) through ``lab.client``,
    the Lab's own registry and client (docs/guide.md)."""

    def __init__(self, log_level: str = "warning", *, wire: bool = False):
        self.log_level, self.wire = log_level, wire
        self.client = Client()
        self._handles: dict[str, ServerHandle] = {}
        self._pools: list = []  # CellPools this lab started (``serve_pool``); closed with the lab
        self._running: set[asyncio.Task] = set()
        self._book = logbook()  # server errors: one line in the cell, the trace in lab.logs()
        self._started = time.time()
        #: The records of the last ``run_many``: all of them, or those finished before it was cancelled.
        self.last_run = None
        serving = [lab for lab in _labs if lab._handles]
        if serving and is_user_file(sys._getframe(1).f_code.co_filename):  # gymlab's own Labs (reverify) never warn
            warnings.warn(  # a cell run again: the old Lab's servers (and the agents bound to them) still answer
                f"another Lab of this process is still serving: {'; '.join(map(repr, serving))}. Close it "
                "(lab.close(), before making the new one) unless you mean to keep both; `with Lab() as lab:` "
                "closes one for you",
                stacklevel=2,
            )
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
        from gymlab.resources.simple import release_gap

        if isinstance(server, type):
            instance = server(**config, **({"name": name} if name else {}))
        elif config:
            raise TypeError("config keywords apply to a server class; an instance already has its config")
        else:
            instance = server
            if name:
                instance.name = name
        if gap := release_gap(instance):
            warnings.warn(gap, stacklevel=2)
        if "error_traces" not in instance.model_fields_set:
            instance.error_traces = True  # a crash's trace travels to the failed record
        if instance.num_workers > 1:
            raise ServerStartError(
                f"{instance.name}: num_workers={instance.num_workers}, but a Lab serves in threads of this "
                "process (one worker); run several workers with `gymlab serve CONFIG` and point handles at its URL"
            )
        instance.use_client(self.client)
        old, port = self._handles.pop(instance.name, None), instance.port
        if old is not None:
            old._runner.stop()
            if not port and instance.host == old._runner.host:
                port = old._runner.port  # the same URL, so everything bound to it keeps working
        rest = (instance.name, self.log_level, self.wire, self.client.registry)
        try:
            with self._book.held():  # a failed start prints its error alone (lab.logs() keeps the log)
                runner = LoopServer(instance.app, instance.host, port, *rest).start()
        except ServerStartError:
            if old is None or port == instance.port:
                raise
            warnings.warn(
                f"{instance.name}: port {port} was taken while re-serving, so it now listens on a new URL; "
                "serve the agents bound to it again",
                stacklevel=2,
            )
            runner = LoopServer(instance.app, instance.host, 0, *rest).start()
        handle = old if old is not None and type(old) is handle_cls else handle_cls(instance, runner, self)
        handle.server, handle._runner = instance, runner  # the handle a cell already holds follows too
        self._handles[instance.name] = handle
        return handle

    def serve_model(
        self,
        policy: Callable | None = None,
        *,
        name: str | None = None,
        openai: dict[str, Any] | None = None,
        hf: Any = None,
        tokenizer: Any = None,
        **config: Any,
    ) -> ServerHandle:
        """Start a model server: a ``PolicyModel`` over ``policy(request)``; with
        ``openai=dict(base_url=..., model=..., api_key_env=..., mode=...)`` an ``OpenAIModel`` proxy; with
        ``hf=model_or_path`` (and ``tokenizer``, else loaded from the same path) an ``HFModel`` generating here."""
        if sum(x is not None for x in (policy, openai, hf)) > 1:
            raise TypeError("serve_model takes one of a policy, openai=... or hf=...")
        from gymlab.registry import builtin_class

        if hf is not None:
            kind, config = "hf_model", {"hf": hf, "tokenizer": tokenizer, **config}
        elif openai is not None:
            kind, config = "openai_model", {**openai, **config}
        else:
            kind, config = "policy_model", {"policy": policy, **config}
        return self.serve(builtin_class("responses_api_models", kind), name=name or kind, **config)

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
        if resources is not None:  # a handle, or a URL
            config["resources_server"] = getattr(resources, "url", resources)
        if model is not None:
            config["model_server"] = getattr(model, "url", model)
        return self.serve(
            cls, name=name or (agent if isinstance(agent, str) else None), handle_cls=AgentHandle, **config
        )

    def serve_pool(
        self,
        env: type[BaseServer],
        *,
        agent: str | type[BaseServer] = "simple_agent",
        model: Any = None,
        replicas: int = 1,
        cpus_per_replica: float = 1.0,
        address: str | None = None,
        name: str | None = None,
        agent_config: dict[str, Any] | None = None,
        runtime_env: dict[str, Any] | None = None,
        **config: Any,
    ):
        """A ``CellPool`` of ``replicas`` Ray cells (the ``ray`` extra), each running ``env``, the agent and the model
        (a policy, ``dict(openai=...)`` or a URL every node reaches) as this Lab would; ``address``: None starts a
        local cluster, ``"auto"`` or ``HOST:PORT`` joins one (docs/cluster.md)."""
        from gymlab.cluster.pool import CellPool
        from gymlab.cluster.recipe import env_recipes

        recipes, agent_name = env_recipes(env, agent, model, name, agent_config, config)
        pool = CellPool(
            recipes,
            replicas=replicas,
            cpus_per_replica=cpus_per_replica,
            name=agent_name,
            address=address,
            runtime_env=runtime_env,
            log_level=self.log_level,
        )
        self._pools.append(pool)
        return pool

    def episode(self, target: ServerHandle, row: dict[str, Any], *, model: Any = None, max_steps: int | None = None):
        """An interactive episode of ``row`` against a resources server or an agent's environment; ``model``
        (a handle or URL) answers ``model_turn``/``step()`` (an agent brings its own). A ``CellPool``
        (``serve_pool``) pins the episode to one cell: its environment and model."""
        if is_pool(target):
            from gymlab.cluster.bridge import pinned

            at = pinned(target, self.client.registry)
            at["model_url"] = getattr(model, "url", model) or at["model_url"]
            at["max_steps"] = max_steps if max_steps is not None else at["max_steps"]
        else:
            agent = target.server if isinstance(target, AgentHandle) else None
            if agent is not None:
                env_url, env_handle = getattr(agent, "resources_server", ""), self._env_handle(target)
                if not env_url:
                    raise EpisodeError(f"{target.name}: the agent has no resources_server; serve it with resources=...")
                model = model if model is not None else (getattr(agent, "model_server", "") or None)
                max_steps = max_steps if max_steps is not None else getattr(agent, "max_steps", None)
            elif isinstance(target, ServerHandle):
                env_url, env_handle = target.url, target
            else:
                raise TypeError(
                    f"lab.episode takes a server handle or an agent handle (from lab.serve / lab.serve_agent), "
                    f"not {type(target).__name__}"
                )
            by_url = {h.url: h.name for h in self._handles.values()}
            at = {
                "env_url": env_url,
                "env_name": env_handle.name if env_handle else env_url,
                "model_url": model if isinstance(model, str) else getattr(model, "url", None),
                "model_name": by_url.get(model, model) if isinstance(model, str) else getattr(model, "name", ""),
                "agent_name": target.name if agent is not None else "",
                "max_steps": max_steps,
                "protocol": _protocol_of(env_handle.server if env_handle is not None else None, agent),
            }
        cls = SeedVerifyEpisode if at["protocol"] == "seed/verify" else GymnasiumEpisode
        fields = ("env_name", "model_url", "model_name", "agent_name", "max_steps")
        return cls(at["env_url"], row, client=self.client, **{k: at[k] for k in fields})

    def run_many(
        self,
        agent: AgentHandle,
        rows: list[dict[str, Any]],
        *,
        repeats: int = 1,
        concurrency: int = 16,
        on_error: str = "record",
        progress: bool = False,
        check: bool = True,
        max_retries: int = 0,
    ):
        """Run every row ``repeats`` times ("aabbcc" order) through ``agent`` (an agent handle or a ``CellPool``),
        the rows checked first (``check=False`` skips); returns ``Rollouts``, failures summarised in one line.
        An Interrupt or a stopped run keeps the finished episodes in ``lab.last_run``."""
        __tracebackhide__ = True
        state = RunState()
        options = dict(repeats=repeats, concurrency=concurrency, on_error=on_error, progress=progress, check=check)
        options.update(max_retries=max_retries)  # retries of a transport or provider failure (runs.arun_many)
        try:
            return run_sync(self._run_many(agent, rows, state, **options))
        except KeyboardInterrupt:
            raise Interrupted(state.cancelled_line()) from None  # one line under the cell, no traceback
        except asyncio.CancelledError as exc:
            print(state.cancelled_line(), file=sys.stderr, flush=True)
            raise type(exc)(state.cancelled_line()) from None

    async def arun_many(self, agent: AgentHandle, rows: list[dict[str, Any]], **options: Any):
        """``run_many`` for async code, with its keywords (``await lab.arun_many(...)`` in a cell, or a task)."""
        state = RunState()
        try:
            return await self._run_many(agent, rows, state, **options)
        except asyncio.CancelledError:
            print(state.cancelled_line(), file=sys.stderr, flush=True)
            raise

    async def _run_many(self, agent: AgentHandle, rows: list[dict[str, Any]], state, *, check: bool = True, **options):
        if check and not (report := self.check(agent, rows)).ok:
            raise ConfigError(f"{report} (fix the rows or the server; run_many(..., check=False) skips this check)")
        task = asyncio.current_task()
        self._running.add(task)
        env = None if is_pool(agent) else self._env_handle(agent)
        try:
            env_name = agent.env_name() if is_pool(agent) else getattr(env, "name", None)
            result = await arun_many(agent, rows, env_name=env_name, state=state, **options)
        except BaseException:  # an Interrupt, on_error="raise", RunStopped: the finished episodes are kept
            self.last_run = Rollouts(state.finished)
            raise
        finally:
            self._running.discard(task)
        result.reward_range = getattr(getattr(env, "server", None), "reward_range", None)
        self.last_run = result
        return result

    def _env_handle(self, agent: ServerHandle) -> ServerHandle | None:
        """The handle of the resources server ``agent`` is bound to, when this lab serves it."""
        url = getattr(agent.server, "resources_server", None)
        return next((h for h in self._handles.values() if h.url == url), None)

    def check(self, target: ServerHandle, rows: list[dict[str, Any]]):
        """The tools ``rows`` declare against the routes the environment serves, and the rows' fields
        against its seed and verify request models (``target``: its handle, or an agent handle bound
        to it): a ``CheckReport`` naming each mismatch."""
        from gymlab.resources.simple import SimpleResourcesServer, row_problems
        from gymlab.resources.tools import CheckReport, check_rows

        if is_pool(target):
            return target.check(rows)
        env = self._env_handle(target) if isinstance(target, AgentHandle) else target
        if env is None or not isinstance(env.server, SimpleResourcesServer):
            return CheckReport((env or target).name, [])  # a remote or Gymnasium environment: its tools are not routes
        report = check_rows(env.server, rows)
        report.problems += row_problems(env.server, rows)
        return report

    def cancel(self) -> int:
        """Cancel every ``run_many`` of this lab that is running (from another thread, or a task);
        returns how many were cancelled. Their sessions are closed, their finished records kept."""
        running = [t for t in self._running if not t.done()]
        for task in running:
            task.get_loop().call_soon_threadsafe(task.cancel)
        return len(running)

    def logs(self, last: int | None = 20, *, all: bool = False):
        """The errors the servers of this process logged since this lab started (the last ``last``),
        each with its full traceback; ``all=True``: every entry kept."""
        entries = [e for e in self._book.entries if all or e.time >= self._started]
        return LogView(entries[-last:] if last else entries)

    def close(self) -> None:
        """Stop every server this lab started, and every pool's cells."""
        for pool in self._pools:
            pool.close()
        self._pools.clear()
        for handle in self._handles.values():
            handle.server.stop_work()  # long work ends first, so no in-flight request holds the stop
        for handle in list(self._handles.values()):
            handle._runner.stop()
        self._handles.clear()
        if threading.current_thread().name == "gymlab-sync":  # called on gymlab's loop: closed after this call
            background_loop().create_task(self.client.close())
        else:
            run_sync(self.client.close())

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<Lab {', '.join(f'{n}={h.url}' for n, h in self._handles.items()) or 'no servers'}>"


def _protocol_of(server: Any, agent: Any) -> str:
    """'seed/verify' or 'gymnasium', from the environment's routes (or the agent's kind if it is remote)."""
    if server is None:
        return "gymnasium" if "gymnasium" in type(agent).__name__.lower() else "seed/verify"
    if protocol := protocol_of(server):
        return protocol
    raise EpisodeError(
        f"{server.name}: serves neither /seed_session+/verify nor /reset+/step; "
        "lab.episode needs a resources server (SimpleResourcesServer or GymnasiumServer)"
    )


@atexit.register
def _close_all() -> None:
    for lab in list(_labs):
        lab.close()
