"""Several uvicorn worker processes for one server (``num_workers > 1``), sharing a 0700 directory with the
launcher; each serves the entrypoint's ``app`` and dies with its launcher (docs/runtime.md)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Any

from gymlab._runtime.env import CONFIG_ENV, die_with_parent, read_config, write_config
from gymlab._runtime.spec import ServerSpec
from gymlab._runtime.stack import settle_heap
from gymlab.errors import ConfigError

#: Set by the launcher for its workers: JSON with the entrypoint file, module name and state dir.
WORKERS_ENV = "GYMLAB_WORKERS"

#: This process launched workers (it carries ``WORKERS_ENV`` for them, but is not one of them).
_launcher = False


def worker_context() -> dict[str, Any] | None:
    """The launcher's description of this worker, or None outside a worker process."""
    if _launcher:
        return None
    raw = os.environ.get(WORKERS_ENV)
    return json.loads(raw) if raw else None


def entrypoint_of(server_cls: type) -> tuple[str, str]:
    """(real path, module name) of the file that defines ``server_cls``."""
    module = sys.modules.get(server_cls.__module__)
    file = getattr(module, "__file__", None)
    if not file:
        raise RuntimeError(
            f"{server_cls.__name__} is not defined in a file (defined in {server_cls.__module__!r}); "
            "num_workers > 1 needs an entrypoint file whose module-level `app` each worker serves"
        )
    return os.path.realpath(file), server_cls.__module__


def check_workers(server_cls: type | ServerSpec, num_workers: int) -> str | None:
    """Why ``server_cls`` cannot run with ``num_workers`` workers, or None when it can (for dry runs)."""
    if num_workers <= 1:
        return None
    cls = server_cls if isinstance(server_cls, type) else type(server_cls)
    instance = server_cls if not isinstance(server_cls, type) else cls.model_construct()
    reason = instance.multiple_workers_unsupported_reason()
    if reason:
        return f"{cls.__name__} cannot run with num_workers={num_workers}: {reason}; set num_workers: 1"
    try:
        path, _ = entrypoint_of(cls)
        source = Path(path).read_text()
    except (RuntimeError, OSError) as exc:
        return f"{cls.__name__}: num_workers={num_workers}: {exc}"
    if "is_gymlab_fastapi_entrypoint" not in source and "is_nemo_gym_fastapi_entrypoint" not in source:
        return (
            f"{cls.__name__}: num_workers={num_workers} needs {path} to end with\n"
            f'    if __name__ == "__main__":\n        {cls.__name__}.run_webserver()\n'
            f"    elif is_gymlab_fastapi_entrypoint(__file__):\n        app = {cls.__name__}.run_webserver()\n"
            "(from gymlab import is_gymlab_fastapi_entrypoint): each worker imports the file and serves `app`"
        )
    return None


#: The session secret's file in the launcher's private directory (mode 0600).
SECRET_FILE = "session_secret"


def worker_secret() -> str | None:
    """The session secret the launcher left for its workers, or None outside a worker."""
    ctx = worker_context()
    if ctx is None:
        return None
    with open(os.path.join(ctx["dir"], SECRET_FILE)) as f:
        return f.read()


def serve_workers(server: ServerSpec, log_level: str = "info") -> None:
    """Run ``server`` as ``server.num_workers`` uvicorn workers on one port until stopped."""
    global _launcher
    where = f"{server.name}: num_workers={server.num_workers}"
    if reason := check_workers(server, server.num_workers):
        raise ConfigError(f"{where}: {reason}")
    from uvicorn.supervisors import Multiprocess

    from gymlab._runtime.ownership import create_table
    from gymlab._runtime.serve import bind_socket, uvicorn_config

    path, module = entrypoint_of(type(server))
    worker_config = read_config()
    try:
        worker_config.update(
            server.model_dump(mode="json", include=set(server.model_fields_set) | {"name", "num_workers"})
        )
    except Exception as exc:  # a field that only lives in memory cannot reach another process
        raise ConfigError(f"{where}: its config cannot be sent to the workers as JSON: {exc}") from exc
    worker_config.pop("session_secret", None)  # workers read it from SECRET_FILE
    saved = {k: os.environ.get(k) for k in (CONFIG_ENV, WORKERS_ENV)}
    state_dir = tempfile.mkdtemp(prefix="gymlab-workers-")  # mode 0700: only this user reaches the sockets
    os.environ[CONFIG_ENV] = write_config(worker_config, state_dir)  # in the private directory, removed with it
    ctx = {"entrypoint": path, "module": module, "dir": state_dir, "parent": os.getpid()}
    os.environ[WORKERS_ENV] = json.dumps(ctx)
    _launcher = True
    try:
        fd = os.open(os.path.join(state_dir, SECRET_FILE), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(server.session_secret.get_secret_value())
        create_table(state_dir)
        sock = bind_socket(server.host, server.port)
        host, port = sock.getsockname()[:2]
        print(f"gymlab: serving {server.name} on http://{host}:{port} with {server.num_workers} workers", flush=True)
        config = uvicorn_config("gymlab._runtime.workers:app", log_level, workers=server.num_workers)
        Multiprocess(config, sockets=[sock]).run()
    finally:
        shutil.rmtree(state_dir, ignore_errors=True)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        _launcher = False


def _orphaned(ctx: dict[str, Any]) -> None:
    """A worker whose launcher died: remove the launcher's directory, then stop as on SIGTERM."""
    shutil.rmtree(ctx["dir"], ignore_errors=True)
    os.kill(os.getpid(), signal.SIGTERM)


def _load_entrypoint_app() -> Any:
    """The entrypoint's module-level ``app`` (uvicorn asks for ``gymlab._runtime.workers:app``)."""
    ctx = worker_context()
    if ctx is None:
        raise AttributeError("gymlab._runtime.workers.app exists only inside a gymlab worker process")
    signal.signal(signal.SIGUSR1, lambda signum, frame: _orphaned(ctx))  # uvicorn takes SIGTERM for itself
    die_with_parent(ctx["parent"], signal.SIGUSR1)
    path = ctx["entrypoint"]
    # Under multiprocessing's spawn the entrypoint may already run here as __mp_main__.
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        if file and "app" in vars(module) and os.path.realpath(file) == path:
            return module.app
    name = ctx["module"]
    if name in ("__main__", "__mp_main__") or name in sys.modules:
        name = f"gymlab_entrypoint_{Path(path).stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    if "app" not in vars(module):
        raise RuntimeError(
            f"{path} defines no module-level `app` for the worker to serve; end it with "
            "`elif is_gymlab_fastapi_entrypoint(__file__): app = YourServer.run_webserver()`"
        )
    settle_heap()  # this worker's imports and app, out of the collector's sight
    return module.app


def __getattr__(name: str) -> Any:
    if name == "app":
        return _load_entrypoint_app()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
