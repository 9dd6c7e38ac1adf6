"""The base of every gymlab server: configuration as pydantic fields, a FastAPI app, a runner."""

from __future__ import annotations

import contextlib
import functools
import re
import secrets
from collections.abc import AsyncIterator
from typing import Any, ClassVar

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, SecretStr
from starlette.middleware import Middleware

from gymlab._http.client import Client
from gymlab._runtime.env import read_config


def untyped_body(app: FastAPI, server: str) -> None:
    """Refuse a POST route whose endpoint has an untyped parameter (FastAPI would 422 every call)."""
    import inspect

    for route in app.routes:
        endpoint, methods = getattr(route, "endpoint", None), getattr(route, "methods", None) or ()
        if endpoint is None or "POST" not in methods:
            continue
        for p in inspect.signature(endpoint).parameters.values():
            if p.annotation is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                name = getattr(endpoint, "__name__", "the endpoint")
                raise TypeError(
                    f"{server}: POST {getattr(route, 'path', '?')} ({name}) has a parameter {p.name!r} with no type annotation, "
                    f"so every call would fail with a 422; annotate it: `{p.name}: YourArguments` (a pydantic "
                    "model of the body) or `request: Request`"
                )


class _HybridMethod:
    """A method callable on the class (building an instance from config) or on an instance."""

    def __init__(self, func):
        self.func = func

    def __get__(self, obj, cls):
        def bound(*args, **kwargs):
            target = obj if obj is not None else cls.from_environment()
            return self.func(target, *args, **kwargs)

        bound.__doc__ = self.func.__doc__
        return bound


class BaseServer(BaseModel):
    """A server's configuration (fields: the YAML keys) and behaviour (routes added in ``setup_webserver``)."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid", ignored_types=(_HybridMethod,))

    name: str = ""
    host: str = "127.0.0.1"
    port: int = 0
    num_workers: int = 1
    session_secret: SecretStr = Field(
        default_factory=lambda: SecretStr(secrets.token_hex(32)),
        description="Signs session cookies; random per server unless configured.",
    )

    session_close_retry_window_seconds: float = Field(
        default=300.0,
        description="How long a closed session stays fenced, and owned by its worker, after its last request.",
    )

    session_ttl_seconds: float | None = Field(
        default=3600.0,
        description="An episode session idle this long (no request names it) is released as if closed; "
        "None or 0: never.",
    )
    max_body_bytes: int = Field(
        default=8 * 1024 * 1024,
        description="Largest request body accepted; a larger one is answered 413 before it is read in full.",
    )
    max_metrics_body_bytes: int = Field(
        default=32 * 1024 * 1024,
        description="The same bound for /aggregate_metrics, whose body is a whole run's verify answers "
        "(about 200,000 answers without their steps, response and responses_create_params).",
    )

    error_traces: bool = Field(
        default=False,
        description="Put a crash's traceback in its 500 body (``trace``), so the failed record keeps it. "
        "A Lab turns it on for the servers it runs; keep it off for servers others reach.",
    )

    _app: Any = PrivateAttr(default=None)
    _owns_client: bool = PrivateAttr(default=True)

    #: With several workers, route each session's requests to the worker holding it (False: no state to route).
    routes_sessions_to_owner: ClassVar[bool] = True
    #: Routes besides ``/seed_session`` that open a session's ownership, and besides ``/close_session``
    #: and ``/verify`` that end it.
    checkpoint_session_starts: ClassVar[frozenset[str]] = frozenset()
    checkpoint_session_ended: ClassVar[frozenset[str]] = frozenset()

    #: The rewards an episode can earn, ``(low, high)``, bounding the plots' intervals (None: [0, 1] or unbounded).
    reward_range: ClassVar[tuple[float, float] | None] = None

    #: Config keys a YAML file may carry that are meant for other layers, not for this class.
    config_only_keys: ClassVar[frozenset[str]] = frozenset({"entrypoint", "domain", "datasets", "description"})

    def model_post_init(self, __context: Any) -> None:
        if not self.name:
            self.name = re.sub(r"(?<!^)(?=[A-Z])", "_", type(self).__name__).lower()  # CalcServer: calc_server

    @classmethod
    def from_environment(cls, **overrides: Any) -> BaseServer:
        """Build from the config file that ``gymlab serve`` names in ``GYMLAB_SERVER_CONFIG``."""
        raw = read_config()
        raw = {k: v for k, v in raw.items() if k not in cls.config_only_keys}
        if "session_secret" not in raw:
            from gymlab._runtime.workers import worker_secret

            secret = worker_secret()  # a worker of several: the launcher's secret, from its private file
            if secret is not None:
                raw["session_secret"] = secret
        raw.update(overrides)
        return cls(**raw)

    def setup_webserver(self) -> FastAPI:
        """Return the FastAPI app; subclasses call ``super()`` and add their routes."""
        from gymlab._runtime.app import build_app

        return build_app(self)

    @property
    def app(self) -> FastAPI:
        """The app, built once per instance."""
        if self._app is None:
            app = self.setup_webserver()
            untyped_body(app, type(self).__name__)
            self._app = app
        return self._app

    @functools.cached_property
    def client(self) -> Client:
        """The server's HTTP client: its Lab's (``use_client``), else its own, closed at shutdown (a cached
        property: read at every hop, where a private attribute's read is pydantic's slow path)."""
        self._owns_client = True
        return Client()

    def use_client(self, client: Client) -> None:
        """Make ``client`` (its owner's, which closes it) the one this server's hops use."""
        self.client, self._owns_client = client, False

    async def close_client(self) -> None:
        """Close the client this server made itself (a handed one is its owner's to close)."""
        if self._owns_client and "client" in vars(self):
            client = self.client
            del self.client
            await client.close()

    def middleware_parts(self) -> list[Middleware]:
        """Middleware outside the app's own (outermost first), e.g. ``Middleware(CancelOnHangup)``; extend super()'s."""
        return []

    def lifespan_parts(self) -> list[contextlib.AbstractAsyncContextManager]:
        """Async context managers held from startup to stop (e.g. ``_runtime.app.on_stop(close)``); extend
        super()'s, whose first holds the server's HTTP client."""
        return [self._client_held()]

    @contextlib.asynccontextmanager
    async def _client_held(self) -> AsyncIterator[None]:
        self.client  # noqa: B018 (made at startup, not on the first hop)
        try:
            yield
        finally:
            await self.close_client()

    def stop_work(self) -> None:
        """Called (any thread) as the server starts stopping: end long work (a generation) so requests answer."""

    def multiple_workers_unsupported_reason(self) -> str | None:
        """Why this server needs one worker (state that session routing cannot reach), or None."""
        return None

    @_HybridMethod
    def run_webserver(self) -> FastAPI | None:
        """Serve in the foreground (Ctrl-C stops); starts ``num_workers > 1`` workers; in a worker, the app."""
        from gymlab._runtime import workers

        if workers.worker_context() is not None:
            return self.app
        if self.num_workers > 1:
            workers.serve_workers(self)
            return None
        from gymlab._runtime.serve import run_foreground

        run_foreground(self.app, self.host, self.port, on_exit=self.stop_work)
        return None
