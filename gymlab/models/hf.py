"""HFModel: POST /v1/responses answered by a transformers causal LM in this process (docs/models.md)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from fastapi import FastAPI
from pydantic import Field, PrivateAttr
from starlette.middleware import Middleware

from gymlab._runtime.app import on_stop
from gymlab._runtime.hangup import CancelOnHangup
from gymlab.errors import ConversionError
from gymlab.models.chat_convert import chat_messages, chat_tools
from gymlab.models.hf_batch import Batcher, Closed, CountArrivals, QueueFull, Row, generate_rows
from gymlab.models.streaming import Refused, serve_responses
from gymlab.models.tool_parsers import ToolParser, loads, tool_parser
from gymlab.protocol import (
    NeMoGymResponse,
    ResponseCreateParams,
    Usage,
    assistant_message,
    function_call,
)
from gymlab.protocol.responses import TOKEN_FIELDS
from gymlab.server import BaseServer

log = logging.getLogger("gymlab.models.hf")


#: What a request to a local model may hold, as the errors about one it cannot render say.
TEMPLATE_TAKES = "send messages with text content, function calls and their outputs"


def load(hf: Any, tokenizer: Any) -> tuple[Any, Any]:
    """``(model, tokenizer)`` from a model object (as is) or a path (eval mode); no ``train`` extra: ImportError."""
    try:
        import torch  # noqa: F401
        import transformers
    except ImportError as exc:
        raise ImportError(
            f"HFModel needs torch and transformers, which are not installed here ({exc}); "
            "install them with `pip install 'gymlab[train]'`"
        ) from exc
    model = transformers.AutoModelForCausalLM.from_pretrained(hf).eval() if isinstance(hf, str) else hf
    if tokenizer is None:
        tokenizer = hf if isinstance(hf, str) else getattr(model, "name_or_path", "")
        if not tokenizer:
            raise ValueError("HFModel: a model object needs tokenizer=...; only a path names its tokenizer")
    if isinstance(tokenizer, str):
        tokenizer = transformers.AutoTokenizer.from_pretrained(tokenizer)
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError("HFModel: the tokenizer has no chat_template; set one (tokenizer.chat_template = ...)")
    return model, tokenizer


class HFModel(BaseServer):
    """A model server generating with a transformers causal LM: ``HFModel(hf="path/to/checkpoint")``."""

    name: str = "hf_model"
    hf: Any = Field(description="A transformers causal LM, or a local path / hub name to load one from.")
    tokenizer: Any = Field(None, description="The tokenizer, or where to load it; None: from `hf`'s path.")
    model_name: str = Field("", description="The name answers carry; empty: `hf`'s path or the model's name.")
    max_output_tokens: int = Field(
        256, ge=1, description="Tokens an answer may have; a request asking more is clamped."
    )
    temperature: float = Field(1.0, ge=0, le=2, description="When the request gives none; 0 is greedy.")
    top_p: float = Field(1.0, gt=0, le=1, description="When the request gives none.")
    context_length: int | None = Field(None, ge=1, description="Prompt + answer tokens; None: the model's own.")
    batch_window_ms: float = Field(5.0, ge=0, description="How long a batch waits for more requests.")
    max_batch: int = Field(16, ge=1, description="Most requests generated together.")
    max_queue: int = Field(256, ge=1, description="Most requests waiting; past it: 429.")
    timeout_s: float = Field(120.0, gt=0, description="A request's budget, waiting included; past it: 504.")
    tool_parser: str | Callable = Field("auto", description="auto, schema, hermes, llama3, none, or a callable.")
    threads: int | None = Field(
        None, ge=1, description="torch threads of the generating thread (that thread alone); None: torch's default."
    )

    _model: Any = PrivateAttr(None)
    _tok: Any = PrivateAttr(None)
    _parse: ToolParser | None = PrivateAttr(None)
    _batcher: Batcher | None = PrivateAttr(None)
    _context: int = PrivateAttr(0)

    @property
    def batches(self) -> int:
        """How many ``generate`` batches this server has run (a server-side count)."""
        return self._batcher.batches if self._batcher is not None else 0

    def setup_webserver(self) -> FastAPI:
        self._model, self._tok = load(self.hf, self.tokenizer)
        self._parse = tool_parser(self.tool_parser, self._tok)
        self._context = self.context_length or _context_of(self._model, self._tok)
        if not self.model_name:
            self.model_name = self.hf if isinstance(self.hf, str) else getattr(self._model, "name_or_path", "") or "hf"
        ids = getattr(self._model.generation_config, "eos_token_id", None)
        eos = {self._tok.eos_token_id, *(ids if isinstance(ids, (list, tuple, set)) else [ids])} - {None}
        if not eos:
            raise ValueError("HFModel: neither the tokenizer nor the model names an end-of-turn token (eos_token_id)")
        pad = self._tok.pad_token_id if self._tok.pad_token_id is not None else min(eos)
        self._batcher = Batcher(
            functools.partial(generate_rows, self._model, eos, pad),
            window_s=self.batch_window_ms / 1000,
            max_batch=self.max_batch,
            max_queue=self.max_queue,
            threads=self.threads,
        )
        app = super().setup_webserver()
        serve_responses(app, self.respond, self.name)
        return app

    def middleware_parts(self) -> list[Middleware]:
        return [
            *super().middleware_parts(),
            Middleware(CountArrivals, batcher=self._batcher),  # outermost: from the request's headers
            Middleware(CancelOnHangup, paths=frozenset({"/v1/responses"})),  # a hang-up frees its row
        ]

    def lifespan_parts(self) -> list[contextlib.AbstractAsyncContextManager]:
        return [*super().lifespan_parts(), on_stop(self._batcher.close)]

    def multiple_workers_unsupported_reason(self) -> str | None:
        return "HFModel holds its model and batches in one process: several workers would each load it"

    def stop_work(self) -> None:
        """Every row generating or waiting stops at its next token (answered 503, ``shutdown``)."""
        if self._batcher is not None:
            self._batcher.stop.set()

    async def respond(self, body: ResponseCreateParams) -> NeMoGymResponse:
        start, batcher = time.monotonic(), self._batcher
        prompt, tools = await asyncio.to_thread(self._prompt, body)
        row = Row(prompt, *self._sampling(body, len(prompt)), deadline=start + self.timeout_s)
        try:
            batcher.submit(row)
            await asyncio.wait_for(row.future, self.timeout_s + 30)  # a step that never ends
        except QueueFull:
            hint, kind = "send fewer at once", "provider_quota_exhausted"
            raise Refused(429, f"{self.max_queue} requests are already waiting (max_queue)", hint, kind) from None
        except TimeoutError:
            row.finish = "timeout"
        except Closed as exc:
            raise Refused(503, str(exc), "serve the model again", "shutdown") from None
        except Exception as exc:  # noqa: BLE001 - generation itself failed: the model server's fault
            log.exception("%s: generation failed", self.name)
            raise Refused(503, f"generation failed: {type(exc).__name__}: {exc}", "", "provider_unavailable") from None
        finally:
            if row.future is not None:  # submitted: counted in flight
                batcher.release(row)
        if row.finish == "cancelled":  # the server is closing (a hung-up caller is gone: no one reads this)
            raise Refused(503, "the model server closed during the generation", "serve the model again", "shutdown")
        if row.finish == "timeout":
            raise Refused(
                504,
                f"no answer within timeout_s={self.timeout_s:g} s (the generation budget)",
                "raise timeout_s, lower max_output_tokens or max_batch",
                "transport_timeout",
            )
        return await asyncio.to_thread(self._answer, body, row, tools)

    def _prompt(self, body: ResponseCreateParams) -> tuple[list[int], list[dict]]:
        try:
            prompt, tools = prompt_ids(self._tok, body)
        except ConversionError as exc:
            raise Refused(400, str(exc)) from None
        except Exception as exc:  # noqa: BLE001 - the template refused the conversation (a jinja error)
            raise Refused(400, f"the chat template cannot render this conversation: {exc}", TEMPLATE_TAKES) from None
        if len(prompt) >= self._context:
            raise Refused(
                400,
                f"the prompt is {len(prompt)} tokens, and the model's context is {self._context} tokens (context_length)",
                "shorten the conversation or serve a model with a longer context",
            )
        return prompt, tools

    def _sampling(self, body: ResponseCreateParams, prompt_len: int) -> tuple[float, float, int]:
        """(temperature, top_p, max new tokens) of ``body``, checked; a token budget over the limit is clamped."""
        temperature = self.temperature if body.temperature is None else body.temperature
        top_p = self.top_p if body.top_p is None else body.top_p
        if not 0 <= temperature <= 2:
            raise Refused(400, f"temperature must be between 0 and 2, got {temperature}")
        if not 0 < top_p <= 1:
            raise Refused(400, f"top_p must be in (0, 1], got {top_p}")
        asked = self.max_output_tokens if body.max_output_tokens is None else body.max_output_tokens
        if asked < 1:
            raise Refused(400, f"max_output_tokens must be at least 1, got {asked}")
        return temperature, top_p, min(asked, self.max_output_tokens, self._context - prompt_len)

    def _answer(self, body: ResponseCreateParams, row: Row, tools: list[dict]) -> NeMoGymResponse:
        """The row's tokens as a response: text, parsed tool calls, token ids and logprobs, real usage."""
        tokens = row.tokens[:-1] if row.finish == "stop" else row.tokens  # the end-of-turn token is no text
        raw = self._tok.decode(tokens, skip_special_tokens=False)
        text, calls = self._parse(raw) if tools else (raw.strip(), [])
        output: list[Any] = []
        if text or not calls:
            output.append(assistant_message(text))
        output.extend(function_call(name, args) for name, args in calls)
        first = output[0]
        for key, value in zip(TOKEN_FIELDS, (row.prompt, row.tokens, row.logprobs)):
            setattr(first, key, value)
        n_in, n_out = len(row.prompt), len(row.tokens)
        incomplete = {"reason": "max_output_tokens"} if row.finish == "length" else None
        return NeMoGymResponse(
            model=body.model or self.model_name,
            output=output,
            usage=Usage(input_tokens=n_in, output_tokens=n_out, total_tokens=n_in + n_out),
            incomplete_details=incomplete,
            status="incomplete" if incomplete else "completed",
            tools=body.tools,
            tool_choice=body.tool_choice,
            parallel_tool_calls=body.parallel_tool_calls,
        )


def prompt_ids(tokenizer: Any, body: ResponseCreateParams) -> tuple[list[int], list[dict]]:
    """The request's token ids by the tokenizer's chat template (with its tools), and those tools in Chat form."""
    messages = _template_messages(chat_messages(body, request=True, todo=TEMPLATE_TAKES))
    tools = chat_tools(body.tools) if body.tool_choice != "none" else []
    text = tokenizer.apply_chat_template(messages, tools=tools or None, add_generation_prompt=True, tokenize=False)
    return tokenizer(text, add_special_tokens=False)["input_ids"], tools


def _context_of(model: Any, tokenizer: Any) -> int:
    """The model's context length: its config's positions, or the tokenizer's limit when that is smaller."""
    positions = getattr(model.config, "max_position_embeddings", None) or 2048
    limit = getattr(tokenizer, "model_max_length", None)
    return min(positions, limit) if isinstance(limit, int) and 0 < limit < positions else positions


def _template_messages(messages: list[dict]) -> list[dict]:
    """Chat messages as templates take them: no None content, JSON-object tool-call arguments as dicts (``tojson``)."""
    out = []
    for message in messages:
        message = {**message, "content": "" if message.get("content") is None else message["content"]}
        if calls := message.get("tool_calls"):
            message["tool_calls"] = [{**c, "function": {**c["function"], "arguments": _object(c)}} for c in calls]
        out.append(message)
    return out


def _object(call: dict) -> Any:
    arguments = call["function"]["arguments"]
    return value if isinstance(value := loads(arguments), dict) else arguments
