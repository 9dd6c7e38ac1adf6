"""What the runtime reads of a server: a structural type, so the runtime never imports ``gymlab.server``."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from contextlib import AbstractAsyncContextManager

    from pydantic import SecretStr
    from starlette.middleware import Middleware


class ServerSpec(Protocol):
    """A server as the app stack and the workers see it: its name, limits, secret and session hooks."""

    name: str
    host: str
    port: int
    num_workers: int
    session_secret: SecretStr
    session_close_retry_window_seconds: float
    session_ttl_seconds: float | None
    max_body_bytes: int
    max_metrics_body_bytes: int
    error_traces: bool

    @property
    def model_fields_set(self) -> set[str]: ...

    def multiple_workers_unsupported_reason(self) -> str | None: ...

    def middleware_parts(self) -> list[Middleware]: ...

    def lifespan_parts(self) -> list[AbstractAsyncContextManager]: ...

    def model_dump(self, *, mode: str = ..., include: Any = ...) -> dict[str, Any]: ...
