"""Run a FastAPI app with uvicorn: blocking (``run_webserver``) or in a background thread.

The thread runner follows DESIGN.md: the socket is bound in the caller's thread (SO_REUSEADDR, so a
re-run cell can take the same port at once, and bind errors surface in the caller), signal handlers
are left to the host process, and a startup failure raises in the caller with its real cause.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import socket
import threading
import time

import uvicorn
from uvicorn.lifespan.on import LifespanOn

import gymlab.inproc as inproc
from gymlab._runtime.stack import new_event_loop, settle_heap, uvicorn_options
from gymlab._sync import background_loop
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


class _KeptCause(LifespanOn):
    """uvicorn's lifespan, keeping the trace a failed startup sends (uvicorn only logs it)."""

    trace: str | None = None

    async def send(self, message) -> None:
        if message["type"] == "lifespan.startup.failed":
            self.trace = message.get("message") or None
        await super().send(message)


def _thread_config(app, log_level: str, **options) -> uvicorn.Config:
    """The uvicorn config of a server in this process: the stack's options, and a lifespan that
    keeps a failed startup's cause for the error the caller sees (``_startup_failed``)."""
    config = uvicorn.Config(
        app, log_level=log_level, lifespan="on", access_log=False, timeout_keep_alive=30, **options, **_thread_options()
    )
    config.load()
    config.lifespan_class = _KeptCause
    return config


def _startup_failed(name: str, server: uvicorn.Server) -> ServerStartError:
    """The error for a server whose startup (its lifespan) failed, naming the cause: the last line
    of the trace (the exception and its message); the whole trace is in the log (``lab.logs()``)."""
    trace = getattr(getattr(server, "lifespan", None), "trace", None) or ""
    lines = [line.strip() for line in trace.strip().splitlines() if line.strip()]
    cause = lines[-1] if lines else "an error in its lifespan"
    return ServerStartError(f"{name}: its startup failed: {cause} (its trace: lab.logs() in a Lab, else the log)")


class _ThreadServer(uvicorn.Server):
    """A uvicorn server that never touches signal handlers (the host process owns them)."""

    @contextlib.contextmanager
    def capture_signals(self):
        yield


class ThreadedServer(inproc.Bound):
    """One uvicorn server on its own event loop in a daemon thread."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, name: str = "server", log_level: str = "warning"):
        self.name = name
        self.sock = bind_socket(host, port)
        self.host, self.port = self.sock.getsockname()[:2]
        self.server = _ThreadServer(_thread_config(app, log_level))
        self._error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=f"gymlab-{name}", daemon=True)

    def _run(self) -> None:
        loop = new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(self.server.serve(sockets=[self.sock]))
        except BaseException as exc:  # SystemExit(3) on a lifespan failure
            self._error = exc
        finally:
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def start(self, timeout: float = 30.0) -> ThreadedServer:
        self.thread.start()
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if not self.thread.is_alive():
                self.sock.close()
                if isinstance(self._error, SystemExit):  # uvicorn exits on a lifespan failure
                    raise _startup_failed(self.name, self.server) from None
                raise ServerStartError(f"{self.name} failed to start: {self._error!r}") from self._error
            if time.monotonic() > deadline:
                self.stop()
                raise ServerStartError(f"{self.name} did not start within {timeout:.0f}s")
            time.sleep(0.001)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self.server.should_exit = True
        if self.thread.is_alive() and threading.current_thread() is not self.thread:
            self.thread.join(timeout)
        with contextlib.suppress(OSError):
            self.sock.close()


class LoopServer(inproc.Bound):
    """One uvicorn server as a task on gymlab's background loop, the loop every Lab server shares.

    Sharing one loop is what lets a Lab dispatch calls between its servers in-process (``inproc``):
    the server is registered under its URL unless ``wire`` is true, and stays reachable over its
    socket either way. ``url`` is fixed by the bound socket, so a server re-served on the same port
    keeps every URL bound to it.
    """

    def __init__(
        self,
        app,
        host: str = "127.0.0.1",
        port: int = 0,
        name: str = "server",
        log_level: str = "warning",
        wire: bool = False,
    ):
        self.name, self.wire = name, wire
        self.sock = bind_socket(host, port)
        self.host, self.port = self.sock.getsockname()[:2]
        # log_config=None: uvicorn leaves logging alone (its default config would replace the Lab's
        # one-line error handler on every server it starts).
        self.server = _ThreadServer(_thread_config(app, log_level, log_config=None))
        self.loop = background_loop()
        self._future = None
        self._local: inproc.LocalApp | None = None

    @property
    def running(self) -> bool:
        return self._future is not None and not self._future.done()

    async def _serve(self) -> None:
        try:
            await self.server.serve(sockets=[self.sock])
        except SystemExit:  # uvicorn exits on a lifespan failure: never let it reach the loop
            raise _startup_failed(self.name, self.server) from None

    def start(self, timeout: float = 30.0) -> LoopServer:
        self._future = asyncio.run_coroutine_threadsafe(self._serve(), self.loop)
        deadline = time.monotonic() + timeout
        while not self.server.started:
            if self._future.done():
                self.sock.close()
                error = self._future.exception() if not self._future.cancelled() else None
                if isinstance(error, ServerStartError):
                    raise error
                raise ServerStartError(f"{self.name} failed to start: {error!r}") from error
            if time.monotonic() > deadline:
                self.stop()
                raise ServerStartError(f"{self.name} did not start within {timeout:.0f}s")
            time.sleep(0.001)
        if not self.wire:
            lifespan = getattr(self.server, "lifespan", None)
            self._local = inproc.LocalApp(
                self.server.config.app,
                self.loop,
                self.host,
                self.port,
                self.name,
                state=lambda: getattr(lifespan, "state", {}),
            )
            inproc.register(self._local)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop answering (in-process at once), let in-flight requests finish for up to ``timeout`` s."""
        if self._local is not None:
            inproc.unregister(self._local)
            self._local = None
        self.server.should_exit = True
        future = self._future
        if future is not None and not future.done():
            try:
                on_loop = asyncio.get_running_loop() is self.loop
            except RuntimeError:
                on_loop = False
            if not on_loop:
                try:
                    future.result(timeout)
                except concurrent.futures.TimeoutError:
                    self.server.force_exit = True
                    with contextlib.suppress(Exception):
                        future.result(timeout)
                except Exception:
                    pass
        with contextlib.suppress(OSError):
            self.sock.close()


def _thread_options() -> dict:
    """The stack's uvicorn options for a server on a loop it does not create (the loop is given)."""
    return {k: v for k, v in uvicorn_options().items() if k != "loop"}


def run_foreground(app, host: str, port: int, log_level: str = "info") -> None:
    """Serve ``app`` in the foreground on the stack until Ctrl-C (``python app.py``, ``gymlab serve``)."""
    sock = bind_socket(host, port)
    h, p = sock.getsockname()[:2]
    print(f"gymlab: serving on http://{h}:{p}", flush=True)
    config = uvicorn.Config(app, log_level=log_level, access_log=False, timeout_keep_alive=30, **uvicorn_options())
    settle_heap()
    uvicorn.Server(config).run(sockets=[sock])


def answers_health(url: str, timeout: float = 2.0) -> bool:
    """Whether ``url/health`` answers 200 now (a server process being waited for)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url + "/health", timeout=timeout) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` now (for a server process that binds it itself)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]
