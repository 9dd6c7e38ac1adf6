"""Small helpers for server entrypoints."""

from __future__ import annotations


def is_gymlab_fastapi_entrypoint(file: str) -> bool:
    """True when ``file`` is being imported by a uvicorn worker to serve its module-level ``app``.

    An entrypoint that supports ``num_workers > 1`` ends with::

        if __name__ == "__main__":
            MyServer.run_webserver()
        elif is_gymlab_fastapi_entrypoint(__file__):
            app = MyServer.run_webserver()  # noqa: F401

    Anywhere else (a notebook, a test, ``load_environment``) importing the module builds no app.
    """
    from gymlab._runtime.workers import is_worker_entrypoint

    return is_worker_entrypoint(file)


#: The reference's name for the same check, so an entrypoint ported from it runs with only its import
#: line changed (``from gymlab.utils import is_nemo_gym_fastapi_entrypoint``).
is_nemo_gym_fastapi_entrypoint = is_gymlab_fastapi_entrypoint
