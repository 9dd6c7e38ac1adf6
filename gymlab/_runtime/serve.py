"""Run a FastAPI app with uvicorn: blocking (``run_webserver``) or in a background thread.

The thread runner follows DESIGN.md: the socket is bound in the caller's thread (SO_REUSEADDR, so a
re-run cell can take the same port at once, and bind errors surface in the caller), signal handlers
are left to the host process, and a startup failure raises in the caller with its real cause.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import threading
import time

import uvicorn

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


class _ThreadServer(uvicorn.Server):
    """A uvicorn server that never touches signal handlers (the host process owns them)."""

    def install_signal_handlers(self) -> None:  # uvicorn < 0.29
        pass

    @contextlib.contextmanager
    def capture_signals(self):  # uvicorn >= 0.29
        yield


class ThreadedServer:
    """One uvicorn server on its own event loop in a daemon thread."""

    def __init__(self, app, host: str = "127.0.0.1", port: int = 0, name: str = "server", log_level: str = "warning"):
        self.name = name
        self.sock = bind_socket(host, port)
        self.host, self.port = self.sock.getsockname()[:2]
        config = uvicorn.Config(app, log_level=log_level, lifespan="on", access_log=False, timeout_keep_alive=30)
        self.server = _ThreadServer(config)
        self._error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=f"gymlab-{name}", daemon=True)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
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


def run_blocking(app, host: str, port: int, log_level: str = "info") -> None:
    """Serve in the foreground (``python app.py`` / ``gymlab serve``) until Ctrl-C."""
    sock = bind_socket(host, port)
    h, p = sock.getsockname()[:2]
    print(f"gymlab: serving on http://{h}:{p}", flush=True)
    config = uvicorn.Config(app, log_level=log_level, access_log=False, timeout_keep_alive=30)
    uvicorn.Server(config).run(sockets=[sock])
