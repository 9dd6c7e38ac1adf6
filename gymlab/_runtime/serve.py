"""Run a FastAPI app with uvicorn (foreground, or as a task on an event loop), bound and failing in the caller."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import socket
import threading
import time
from collections.abc import Callable

import uvicorn
from uvicorn.lifespan.on import LifespanOn

from gymlab._http import inproc
from gymlab._runtime.stack import settle_heap, uvicorn_options
from gymlab._sync import background_loop, new_event_loop
from gymlab.errors import ServerStartError

log = logging.getLogger("gymlab.server")


def bind_socket(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # proto=IPPROTO_TCP matters: asyncio sets TCP_NODELAY on accepted sockets only when the listening
    # socket names it, and without it every small response waits ~40 ms for a delayed ACK.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ServerStartError(
            f"cannot bind {host}:{port}: {exc.strerror or exc}; choose another port or port=0 for a free one"
        ) from exc
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def uvicorn_config(app, log_level: str, own_loop: bool = True, **options) -> uvicorn.Config:
    """Every gymlab server's uvicorn config: the stack's options, no access log, idle connections kept 30 s."""
    stack = {k: v for k, v in uvicorn_options().items() if own_loop or k != "loop"}
    return uvicorn.Config(app, log_level=log_level, access_log=False, timeout_keep_alive=30, **stack, **options)


class _KeptCause(LifespanOn):
    """uvicorn's lifespan, keeping the trace a failed startup sends (uvicorn only logs it)."""

    trace: str | None = None

    async def send(self, message) -> None:
        if message["type"] == "lifespan.startup.failed":
            self.trace = message.get("message") or None
        await super().send(message)


class _ThreadServer(uvicorn.Server):
    """A uvicorn server that never touches signal handlers (the host process owns them)."""

    @contextlib.contextmanager
    def capture_signals(self):
        yield


class LoopServer(inproc.Bound):
    """One uvicorn server as a task on ``loop`` (else gymlab's), called in-process through ``registry`` unless
    ``wire``, and over the socket bound here; ``start`` raises its startup failure's cause."""

    def __init__(
        self,
        app,
        host: str = "127.0.0.1",
        port: int = 0,
        name: str = "server",
        log_level: str = "warning",
        wire: bool = False,
        registry: inproc.Registry | None = None,
        loop: asyncio.AbstractEventLoop | None = None,
    ):
        self.name, self.wire, self.registry = name, wire, registry
        self.sock = bind_socket(host, port)
        self.host, self.port = self.sock.getsockname()[:2]
        # log_config=None: uvicorn leaves logging alone (its default config would replace the Lab's
        # one-line error handler on every server it starts).
        config = uvicorn_config(app, log_level, own_loop=False, lifespan="on", log_config=None)
        config.load()
        config.lifespan_class = _KeptCause  # keeps a failed startup's cause
        self.server = _ThreadServer(config)
        self.loop = loop or background_loop()
        self._future: concurrent.futures.Future | None = None
        self._local: inproc.LocalApp | None = None

    @property
    def running(self) -> bool:
        return self._future is not None and not self._future.done()

    async def _serve(self) -> None:
        try:
            await self.server.serve(sockets=[self.sock])
        except SystemExit:  # uvicorn exits on a lifespan failure: never let it reach the loop
            trace = getattr(getattr(self.server, "lifespan", None), "trace", None) or ""
            lines = [line.strip() for line in trace.strip().splitlines() if line.strip()]
            cause = lines[-1] if lines else "an error in its lifespan"  # the trace's last line
            raise ServerStartError(
                f"{self.name}: its startup failed: {cause} (its trace: lab.logs() in a Lab, else the log)"
            ) from None

    def start(self, timeout: float = 30.0) -> LoopServer:
        """Serve; return once uvicorn serves, or raise why it could not within ``timeout`` s."""
        future = self._future = asyncio.run_coroutine_threadsafe(self._serve(), self.loop)
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if future.done():
                self.sock.close()
                error = None if future.cancelled() else future.exception()
                if isinstance(error, ServerStartError):
                    raise error
                raise ServerStartError(f"{self.name} failed to start: {error!r}") from error
            if time.monotonic() > deadline:
                self.stop()
                raise ServerStartError(f"{self.name} did not start within {timeout:.0f}s")
            time.sleep(0.001)
        if not self.wire and self.registry is not None:
            lifespan = getattr(self.server, "lifespan", None)
            self._local = inproc.LocalApp(
                self.server.config.app,
                self.loop,
                self.host,
                self.port,
                self.name,
                state=lambda: getattr(lifespan, "state", {}),
            )
            self.registry.register(self._local)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop answering (in-process at once), let in-flight requests finish for up to ``timeout`` s."""
        if self._local is not None and self.registry is not None:
            self.registry.unregister(self._local)
            self._local = None
        self.server.should_exit = True
        future = self._future
        if future is not None and not future.done():
            try:
                on_loop = asyncio.get_running_loop() is self.loop
            except RuntimeError:
                on_loop = False
            if not on_loop:
                with contextlib.suppress(Exception):
                    future.result(timeout)
                if not future.done():  # requests past the grace are cut, so the lifespan still ends as usual
                    self.loop.call_soon_threadsafe(_cut, self.server.server_state.tasks)
                    with contextlib.suppress(Exception):
                        future.result(timeout)
                if not future.done():
                    self.server.force_exit = True
                    with contextlib.suppress(Exception):
                        future.result(timeout)
        with contextlib.suppress(OSError):
            self.sock.close()


def _cut(tasks: set[asyncio.Task]) -> None:
    """Cancel the requests still running (uvicorn's own set of them) once a stop's grace has passed."""
    for task in list(tasks):
        task.cancel()


class ThreadedServer(LoopServer):
    """A ``LoopServer`` reached over its socket only, on its own event loop in a daemon thread."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, name: str = "server", log_level: str = "warning"):
        loop = new_event_loop()
        self.thread = threading.Thread(target=loop.run_forever, name=f"gymlab-{name}", daemon=True)
        try:
            super().__init__(app, host, port, name, log_level, wire=True, loop=loop)
        except BaseException:  # the port is taken: the loop never runs
            loop.close()
            raise

    def start(self, timeout: float = 30.0) -> ThreadedServer:
        self.thread.start()
        try:
            super().start(timeout)
        except ServerStartError:
            self.stop()
            raise
        return self

    def stop(self, timeout: float = 10.0) -> None:
        super().stop(timeout)
        if threading.current_thread() is not self.thread and not self.loop.is_closed():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(timeout)
            self.loop.close()


class _StoppingServer(uvicorn.Server):
    """A uvicorn server that calls ``on_exit`` at the first Ctrl-C or SIGTERM, before waiting for requests."""

    def __init__(self, config: uvicorn.Config, on_exit: Callable[[], None] | None):
        super().__init__(config)
        self.on_exit = on_exit

    def handle_exit(self, sig, frame) -> None:
        if self.on_exit is not None and not self.should_exit:
            self.on_exit()
        super().handle_exit(sig, frame)


def run_foreground(
    app, host: str, port: int, log_level: str = "info", on_exit: Callable[[], None] | None = None
) -> None:
    """Serve ``app`` in the foreground until Ctrl-C or SIGTERM (``python app.py``, ``gymlab serve``)."""
    sock = bind_socket(host, port)
    h, p = sock.getsockname()[:2]
    print(f"gymlab: serving on http://{h}:{p}", flush=True)
    config = uvicorn_config(app, log_level)
    settle_heap()
    _StoppingServer(config, on_exit).run(sockets=[sock])


def answers_health(url: str, timeout: float = 2.0) -> bool:
    """Whether ``url/health`` answers 200 now (a server process being waited for)."""
    from gymlab._http.client import fetch
    from gymlab.errors import TransportError

    try:
        return fetch("GET", url, "/health", timeout=timeout).status == 200
    except (TransportError, ValueError):
        return False


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` now (for a server process that binds it itself)."""
    with bind_socket(host, 0) as sock:
        return sock.getsockname()[1]
