"""OpenAIModel: POST /v1/responses proxied to an OpenAI-compatible endpoint (docs/models.md)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
from typing import Any, Literal

from fastapi import FastAPI
from pydantic import Field
from starlette.middleware import Middleware

from gymlab._http.client import Reply, error_message
from gymlab._http.retry import backoff_delay, retrying
from gymlab._runtime.hangup import CancelOnHangup
from gymlab.errors import (
    ConfigError,
    ConversionError,
    TransportAnswerTooLarge,
    TransportError,
    TransportTimeout,
    UpstreamError,
)
from gymlab.models.chat_convert import chat_request, response_from_chat
from gymlab.models.streaming import Refused, serve_responses
from gymlab.protocol import NeMoGymResponse, ResponseCreateParams
from gymlab.server import BaseServer

log = logging.getLogger("gymlab.models.openai")

_PASS_THROUGH = {400, 413, 422, 429}
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_KEYISH = re.compile(r"[A-Za-z0-9_\-]{8,}")


def scrub(text: str, secret: str | None) -> str:
    """``text`` with ``secret``, and any 8+ character piece of it, replaced by ``***``."""
    if not secret or not text:
        return text
    text = text.replace(secret, "***")
    return _KEYISH.sub(lambda m: "***" if m.group(0) in secret else m.group(0), text)


class OpenAIModel(BaseServer):
    """A model server in front of an OpenAI-compatible endpoint (``base_url``, ``model``, ``mode``)."""

    name: str = "openai_model"
    base_url: str = Field(description="The endpoint's API root, ending in /v1 (as the openai client takes it).")
    model: str = Field("", description="The upstream model name; when empty the request's `model` is sent.")
    api_key_env: str | None = Field(None, description="Name of the environment variable holding the API key.")
    extra_body: dict[str, Any] = Field(default_factory=dict, description="Merged into every upstream request.")
    mode: Literal["responses", "chat_completions"] = "responses"
    timeout_s: float = 120.0
    max_retries: int = Field(3, ge=0)
    backoff: float = Field(0.5, ge=0, description="First retry delay in seconds; doubles each retry.")
    max_retry_after_s: float = Field(30.0, ge=0, description="Longest Retry-After honoured as asked.")

    def __init__(self, **config: Any):
        if "api_key" in config:  # checked before pydantic, whose errors would echo the value
            raise ConfigError(
                "OpenAIModel reads the API key from the environment: set api_key_env to the "
                "name of the variable that holds it (e.g. api_key_env='OPENAI_API_KEY')"
            )
        env = config.get("api_key_env")
        if isinstance(env, str) and env and not _ENV_NAME.match(env):
            raise ConfigError(
                "api_key_env must be the NAME of an environment variable (like OPENAI_API_KEY), not the key itself"
            )
        super().__init__(**config)
        self.base_url = self.base_url.rstrip("/")

    def setup_webserver(self) -> FastAPI:
        app = super().setup_webserver()
        serve_responses(app, self.respond, self.name)
        return app

    def middleware_parts(self) -> list[Middleware]:
        # no upstream call for a gone caller
        return [*super().middleware_parts(), Middleware(CancelOnHangup, paths=frozenset({"/v1/responses"}))]

    async def respond(self, body: ResponseCreateParams) -> NeMoGymResponse:
        try:
            return await self._respond(body)
        except ConversionError as exc:  # the request has no Chat Completions form
            raise Refused(400, f"the request cannot be sent to {self.base_url}/chat/completions: {exc}") from None
        except UpstreamError as exc:
            message = f"upstream POST {exc.url} " + (
                f"answered HTTP {exc.upstream_status}" if exc.upstream_status else "failed"
            )
            message += f": {exc.cause}" + (f" ({exc.hint})" if exc.hint else "")
            upstream = {"url": exc.url, "status": exc.upstream_status, "message": exc.cause}
            attempts, kind = exc.attempts, exc.failure_kind
            raise Refused(exc.answer_status, message, exc.hint, kind, upstream=upstream, attempts=attempts) from None

    async def _respond(self, body: ResponseCreateParams) -> NeMoGymResponse:
        if self.mode == "chat_completions":
            payload = chat_request(body, self.model, self.extra_body)
            answer = await self.call_upstream("/chat/completions", payload)
            try:
                return response_from_chat(answer, body)
            except ConversionError as exc:
                raise UpstreamError(
                    self.base_url + "/chat/completions", 200, f"the answer is not a chat.completion: {exc}"
                ) from exc
        payload = body.model_dump(mode="json", exclude_unset=True)
        if self.model:
            payload["model"] = self.model
        payload.update(self.extra_body)
        answer = await self.call_upstream("/responses", payload)
        hint = "is this endpoint serving the Responses API? mode='chat_completions' talks to /chat/completions"
        url = self.base_url + "/responses"
        if not isinstance(answer, dict) or "output" not in answer or answer.get("error"):
            # every field of a response has a default, so a 200 error body would validate as empty
            raise UpstreamError(url, 200, f"the answer is not a response: {json.dumps(answer)[:300]}", hint)
        try:
            return NeMoGymResponse.model_validate(answer)
        except ValueError as exc:
            raise UpstreamError(
                url, 200, f"the answer is not a Responses API response: {scrub(str(exc), self._key())[:500]}", hint
            ) from exc

    def _key(self) -> str | None:
        return os.environ.get(self.api_key_env) if self.api_key_env else None

    async def call_upstream(self, path: str, payload: dict) -> Any:
        """POST ``payload`` to ``base_url + path`` with the retries; the parsed JSON answer."""
        url, key = self.base_url + path, self._key()
        headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {key}"} if key else {})}
        data = json.dumps(payload).encode()
        attempts, tries = self.max_retries + 1, 0
        retry_after: float | None = None

        async def once() -> Any:
            nonlocal tries, retry_after
            tries, retry_after = tries + 1, None
            try:
                reply = await self.client.request(
                    "POST",
                    self.base_url,
                    path,
                    data,
                    headers=headers,
                    server=url,
                    timeout=self.timeout_s,
                    connect_timeout=min(30.0, self.timeout_s),
                )
            except TransportAnswerTooLarge as exc:  # an endless or runaway answer: cut, never retried
                hint = "the endpoint's answer is endless or runaway; see its logs"
                raise UpstreamError(url, 0, exc.cause, hint, tries, failure_kind="response_too_large") from None
            except TransportTimeout:
                hint = f"after {tries} attempt(s); raise timeout_s or check the endpoint's load"
                cause = f"no answer within timeout_s={self.timeout_s:g} s"
                raise UpstreamError(url, 0, cause, hint, tries, status=504) from None
            except TransportError as exc:
                hint = f"after {tries} attempt(s); is it running, and is base_url right?"
                raise UpstreamError(
                    url, 0, f"cannot reach the endpoint: {scrub(exc.cause, key)}", hint, tries
                ) from None
            status, retry_after, text = reply.status, _retry_after(reply), scrub(reply.text, key)
            if not 200 <= status < 300:
                raise self._failure(url, status, text, tries)
            try:
                return json.loads(text)
            except ValueError:
                hint = "is base_url the endpoint's API root (ending in /v1)?"
                raise UpstreamError(url, status, f"the answer is not JSON: {text[:300]!r}", hint, tries) from None

        def again(exc: Exception, n: int) -> float | None:
            """Another try after a transport failure, a 429 or a 5xx (not a cut answer), while attempts are left."""
            if not isinstance(exc, UpstreamError) or exc.failure_kind or n >= attempts:
                return None
            if 0 < exc.upstream_status < 500 and exc.upstream_status != 429:
                return None
            asked = retry_after is not None and 0 <= retry_after <= self.max_retry_after_s
            delay = retry_after if asked else backoff_delay(self.backoff, n, cap_s=float("inf"))
            log.warning("%s: upstream %s (attempt %d of %d); retrying in %.2f s", self.name, exc, n, attempts, delay)
            return delay

        return await retrying(once, again)

    def _failure(self, url: str, status: int, text: str, attempts: int) -> UpstreamError:
        message = _upstream_message(text)
        retried = f" after {attempts} attempts" if attempts > 1 else ""
        if status in (401, 403):
            env = self.api_key_env
            if not env:
                check = "no api_key_env is configured: set it to the name of the variable holding the key"
            elif self._key() is None:
                check = f"the environment variable {env} is not set in the model server's process"
            else:
                check = f"check the key in the environment variable {env}"
            hint = f"authentication failed at {self.base_url}; {check}"
        elif status == 404:
            hint = (
                f"is base_url ({self.base_url}) the API root ending in /v1, is the model name "
                f"({self.model or 'from the request'}) right, and does the endpoint serve "
                f"{url.rsplit('/v1', 1)[-1]} (mode={self.mode!r})?"
            )
        elif status == 429:
            hint = f"rate limited{retried}; raise max_retries/backoff or lower the concurrency"
        elif status >= 500:
            hint = f"the endpoint failed{retried}; see its logs"
        else:
            hint = "the endpoint refused the request as sent"
        answer = status if status in _PASS_THROUGH else 502
        return UpstreamError(url, status, message, hint, attempts, status=answer)


def _retry_after(reply: Reply) -> float | None:
    """The wait the upstream asked for, in seconds (``retry-after-ms`` first), or None."""
    for name, scale in (("retry-after-ms", 1000), ("retry-after", 1)):
        if (value := reply.header(name)) is not None:
            with contextlib.suppress(ValueError):
                return float(value) / scale
    return None


def _upstream_message(text: str) -> str:
    """The upstream's own message: OpenAI's ``{"error": {"message": ...}}``, or the body's text."""
    try:
        body = json.loads(text)
    except ValueError:
        return text[:500] or "(empty body)"
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return err["message"][:1000]
        if isinstance(err, str):
            return err[:1000]
    return error_message(text)
