"""The Responses-API subset that crosses the wire: request params (unknown keys refused), response, items."""

from __future__ import annotations

import json
import os
import time
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag, field_validator


def new_id(prefix: str) -> str:
    """A short random id in the reference's style (``msg_…``, ``fc_…``, ``call_…``)."""
    return f"{prefix}_{os.urandom(8).hex()}"


#: An int a request field takes: within 64 bits, as every JSON library and model server reads one (2**70 is a 422).
WireInt = Annotated[int, Field(ge=-(2**63), le=2**63 - 1)]


class _Open(BaseModel):
    model_config = ConfigDict(extra="allow")


class ContentPart(_Open):
    """One part of a message's content (``input_text``, ``output_text``, ...)."""

    type: str = "output_text"
    text: str | None = None


class Message(_Open):
    """A chat message; as output it is the assistant's (``output_text`` parts)."""

    type: Literal["message"] = "message"
    role: Literal["user", "system", "developer", "assistant"] = "assistant"
    content: str | list[ContentPart] = ""
    id: str | None = None
    status: str | None = None

    @property
    def text(self) -> str:
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text or "" for p in self.content)


class FunctionCall(_Open):
    type: Literal["function_call"] = "function_call"
    name: str
    arguments: str = Field(description="A JSON string, as the model wrote it.")
    call_id: str
    id: str | None = None
    status: str | None = None


class FunctionCallOutput(_Open):
    type: Literal["function_call_output"] = "function_call_output"
    call_id: str
    output: str


class SummaryText(_Open):
    type: str = "summary_text"
    text: str


class Reasoning(_Open):
    type: Literal["reasoning"] = "reasoning"
    id: str | None = None
    summary: list[SummaryText] = Field(default_factory=list)
    encrypted_content: str | None = None


#: A model turn's token ids and log-probabilities, on its first output item when its server keeps them (NeMo Gym's names).
TOKEN_FIELDS = ("prompt_token_ids", "generation_token_ids", "generation_log_probs")


class OtherItem(_Open):
    """An item of a type this subset does not model; kept as it came."""

    type: str


_KNOWN = {"message", "function_call", "function_call_output", "reasoning"}


def _item_tag(v: Any) -> str:
    t = v.get("type", "message") if isinstance(v, dict) else getattr(v, "type", "message")
    return t if isinstance(t, str) and t in _KNOWN else "other"  # a non-string type fails OtherItem: 422


Item = Annotated[
    Annotated[Message, Tag("message")]
    | Annotated[FunctionCall, Tag("function_call")]
    | Annotated[FunctionCallOutput, Tag("function_call_output")]
    | Annotated[Reasoning, Tag("reasoning")]
    | Annotated[OtherItem, Tag("other")],
    Discriminator(_item_tag),
]


class FunctionTool(_Open):
    type: str = "function"
    name: str
    description: str | None = ""
    parameters: dict[str, Any] | None = None
    strict: bool | None = True


class ResponseCreateParams(BaseModel):
    """The model request (``responses_create_params``): the reference's 30 fields. Unknown keys are refused."""

    model_config = ConfigDict(extra="forbid")

    input: str | list[Item]
    tools: list[FunctionTool] = Field(default_factory=list)
    tool_choice: Any = "auto"
    parallel_tool_calls: bool | None = True  # null in some of the reference's own rollout files
    model: str | None = None
    instructions: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_output_tokens: WireInt | None = None
    max_tool_calls: WireInt | None = None
    metadata: dict[str, Any] | None = None
    reasoning: dict[str, Any] | None = None
    text: dict[str, Any] | None = None
    truncation: str | None = None
    user: str | None = None
    store: bool | None = None
    previous_response_id: str | None = None
    include: list[str] | None = None
    top_logprobs: WireInt | None = None
    service_tier: str | None = None
    prompt: dict[str, Any] | None = None
    background: bool | None = None
    stream: Literal[False] | None = None
    context_management: list[dict[str, Any]] | None = None
    conversation: str | dict[str, Any] | None = None
    moderation: Any = None
    prompt_cache_key: str | None = None
    prompt_cache_retention: str | None = None
    safety_identifier: str | None = None
    stream_options: dict[str, Any] | None = None

    def input_items(self) -> list[Any]:
        """The input as a list of items (a string becomes one user message)."""
        if isinstance(self.input, str):
            return [Message(role="user", content=self.input)] if self.input else []
        return list(self.input)


class InputTokensDetails(_Open):
    cached_tokens: int | None = 0  # None: the provider left the count out (the reference writes null)


class OutputTokensDetails(_Open):
    reasoning_tokens: int | None = 0  # None: as above


def _add_counts(a: int | None, b: int | None) -> int | None:
    """A sum of token counts; an unknown count makes the sum unknown (never a measured 0)."""
    return None if a is None or b is None else a + b


class Usage(_Open):
    input_tokens: int = 0
    output_tokens: int = 0
    total_tokens: int = 0
    input_tokens_details: InputTokensDetails = Field(default_factory=InputTokensDetails)
    output_tokens_details: OutputTokensDetails = Field(default_factory=OutputTokensDetails)

    def __add__(self, other: Usage | None) -> Usage:
        if other is None:
            return self
        cached = _add_counts(self.input_tokens_details.cached_tokens, other.input_tokens_details.cached_tokens)
        reasoning = (self.output_tokens_details.reasoning_tokens, other.output_tokens_details.reasoning_tokens)
        return Usage(
            input_tokens=self.input_tokens + other.input_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
            input_tokens_details=InputTokensDetails(cached_tokens=cached),
            output_tokens_details=OutputTokensDetails(reasoning_tokens=_add_counts(*reasoning)),
        )


class NeMoGymResponse(_Open):
    """A model (or agent) response: the ``response`` object of the wire reference."""

    id: str = Field(default_factory=lambda: new_id("resp"))
    created_at: float = Field(default_factory=lambda: int(time.time()))
    model: str = ""
    object: Literal["response"] = "response"
    output: list[Item] = Field(default_factory=list)
    parallel_tool_calls: bool | None = True
    tool_choice: Any = "auto"
    tools: list[FunctionTool] = Field(default_factory=list)
    usage: Usage | None = None
    incomplete_details: dict[str, Any] | None = None
    status: str | None = "completed"

    @field_validator("output", mode="before")
    @classmethod
    def _flatten(cls, value: Any) -> Any:
        """Some of the reference's agents write each turn's items as one nested list: read in order."""
        if isinstance(value, list) and any(isinstance(i, list) for i in value):
            return [j for i in value for j in (i if isinstance(i, list) else [i])]
        return value

    @property
    def function_calls(self) -> list[FunctionCall]:
        return [i for i in self.output if isinstance(i, FunctionCall)]

    @property
    def output_text(self) -> str:
        return "".join(i.text for i in self.output if isinstance(i, Message))


def assistant_message(text: str) -> Message:
    return Message(
        id=new_id("msg"),
        role="assistant",
        status="completed",
        content=[ContentPart(type="output_text", text=text, annotations=[])],
    )


def function_call(name: str, arguments: str | dict[str, Any], call_id: str | None = None) -> FunctionCall:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return FunctionCall(
        name=name, arguments=args, call_id=call_id or new_id("call"), id=new_id("fc"), status="completed"
    )


#: The most of a function call's arguments a server reads (characters): past it they are unreadable.
MAX_ARGUMENT_CHARS = 1 << 20


def read_arguments(arguments: str | None, max_chars: int | None = MAX_ARGUMENT_CHARS) -> Any:
    """A function call's ``arguments`` as JSON (empty: ``{}``); not JSON, too long or too deep: ``ValueError``."""
    text = arguments or "{}"
    if max_chars is not None and len(text) > max_chars:
        raise ValueError(f"the arguments are {len(text)} characters, over the {max_chars} a server reads")
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("the arguments are nested deeper than a server reads") from None


def dump_params(params: ResponseCreateParams) -> dict[str, Any]:
    """The request as seed/verify/reset/step bodies carry it: all 30 fields (null when unset), items and tools sparse."""
    data = params.model_dump(mode="json", exclude={"input", "tools"})
    data["input"] = params.input if isinstance(params.input, str) else [dump_item(i) for i in params.input]
    data["tools"] = [dump_item(t) for t in params.tools]
    return data


def dump_item(item: Any) -> dict[str, Any]:
    """An item as wire JSON (None fields left out)."""
    if isinstance(item, BaseModel):
        return item.model_dump(mode="json", exclude_none=True)
    return dict(item)
