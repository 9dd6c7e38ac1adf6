"""The episode record (``Rollout``, ``StepRecord``), the only functions that build one, and ``mean_reward``."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from gymlab.protocol.derived_steps import derived_steps
from gymlab.protocol.failure_kinds import Failure
from gymlab.protocol.responses import Item, NeMoGymResponse, ResponseCreateParams

#: Keys of a record that identify the row rather than describe the episode.
IDENTITY_KEYS = ("_ng_task_index", "_ng_rollout_index", "agent_ref", "env_name")
#: Reserved keys written as null when unset, as NeMo Gym writes them; every other unset field is left out.
NULL_WRITTEN_KEYS = ("failure_kind", "failure_reason")


class StepRecord(BaseModel):
    """One step of an episode: a model turn (or Gymnasium transition) and what it caused."""

    model_config = ConfigDict(extra="allow")

    index: int
    action: list[Item] = Field(default_factory=list, description="The model's output items.")
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    observation: str | None = None
    info: dict[str, Any] = Field(default_factory=dict)
    tool_outputs: list[Item] = Field(default_factory=list)
    tool_errors: int = Field(0, description="Function calls refused before reaching a server (undeclared tool).")
    duration_s: float = 0.0
    reward_components: dict[str, float | None] | None = Field(
        None, description="The step's reward by rubric component (None: a judge of it failed)."
    )


class Rollout(BaseModel):
    """A finished episode, as ``/run`` returns it (plus any fields the verify echoed back)."""

    model_config = ConfigDict(extra="allow")

    responses_create_params: ResponseCreateParams
    response: NeMoGymResponse
    reward: float = 0.0
    mask_sample: bool = False
    failure_kind: str | None = None
    failure_reason: str | None = None
    failure_stage: str | None = Field(None, description="Where a failed episode failed: seed, agent, verification, ...")
    failure_trace: str | None = Field(None, description="The failing server's traceback, when it shared it.")
    terminated: bool | None = Field(None, description="Whether the episode ended on its own terms.")
    truncated: bool | None = Field(None, description="Whether a step limit cut the episode.")
    info: dict[str, Any] | None = Field(None, description="Gymnasium episodes: the final step's info.")
    steps: list[StepRecord] = Field(default_factory=list)
    duration_s: float = 0.0
    reward_components: dict[str, float | None] | None = Field(
        None, description="The reward by rubric component (``gymlab.rewards``); None for a failed judge."
    )
    judgements: list[dict[str, Any]] | None = Field(None, description="What each judge asked and answered.")

    @model_validator(mode="before")
    @classmethod
    def _fill_steps(cls, data: Any) -> Any:
        if type(data) is dict and "steps" not in data and isinstance(data.get("response"), dict):
            return {**data, "steps": derived_steps(data)}
        return data

    def _extra(self, key: str) -> Any:
        extra = self.__pydantic_extra__
        return extra.get(key) if extra else None

    @property
    def task_index(self) -> Any:
        """The row's task index (``_ng_task_index``), or None."""
        return self._extra("_ng_task_index")

    @property
    def repeat(self) -> Any:
        """Which repeat of its task this episode is (``_ng_rollout_index``), or None."""
        return self._extra("_ng_rollout_index")

    @property
    def agent(self) -> str | None:
        """The agent's name (``agent_ref["name"]``; older records: ``agent_name``)."""
        ref = self._extra("agent_ref")
        name: str | None = ref.get("name") if isinstance(ref, dict) else None
        return name if name is not None else self._extra("agent_name")

    @property
    def env(self) -> str | None:
        """The environment server's name (``env_name``), or None."""
        env: str | None = self._extra("env_name")
        return env

    @property
    def failure(self) -> Failure | None:
        """The typed failure of a failed record."""
        if not self.failure_kind:
            return None
        return Failure(
            kind=self.failure_kind,
            stage=self.failure_stage,
            message=self.failure_reason or "",
            trace=self.failure_trace,
        )


#: Keys the record builders own (the declared fields); a row's own field of the same name never overrides them.
_RECORD_KEYS = frozenset(Rollout.model_fields)
#: What a record adds to its dataset row (everything else in a record came from the row).
RESULT_KEYS = (_RECORD_KEYS - {"responses_create_params"}) | {"env_name", "agent_name"}


def own_fields(fields: dict[str, Any]) -> dict[str, Any]:
    """The task's own fields of a row, body or record: not the request, an identity or result key, nor ``_ng_*``."""
    return {
        k: v
        for k, v in fields.items()
        if k != "responses_create_params" and k not in _NOT_OWN and not k.startswith("_ng_")
    }


_NOT_OWN = frozenset({*IDENTITY_KEYS, *RESULT_KEYS})


def record_json(record: Rollout) -> str:
    """A record as JSON text: gymlab's fields left out when unset, ``NULL_WRITTEN_KEYS`` written as null."""
    text = record.model_dump_json(exclude_none=True)
    nulls = "".join(f',"{key}":null' for key in NULL_WRITTEN_KEYS if getattr(record, key) is None)
    return text[:-1] + nulls + "}" if nulls else text


def _row_fields(row: dict[str, Any] | None) -> dict[str, Any]:
    return {k: v for k, v in (row or {}).items() if k not in _RECORD_KEYS}


#: The loop's stop reasons that cut an episode (truncated): a model-call, tool-call or request-size limit.
CUT_BY_LIMIT = ("max_steps", "max_tool_calls", "conversation_too_large")


def verified(
    answer: dict[str, Any] | None,
    steps: list[StepRecord],
    stop_reason: str | None,
    duration_s: float,
    *,
    row: dict[str, Any] | None = None,
    response: NeMoGymResponse | None = None,
    sent: dict[str, tuple[Any, BaseModel]] | None = None,
) -> Rollout:
    """A seed/verify episode: the verify's ``answer`` with the steps; ``sent``: field -> (its dump, its model)."""
    if answer is None:
        answer = {
            "responses_create_params": (row or {}).get("responses_create_params"),
            "reward": math.fsum(s.reward for s in steps),
        }
    elif steps:
        last = steps[-1]
        last.reward = float(answer.get("reward", 0.0))
        last.reward_components = answer.get("reward_components")
        last.terminated = stop_reason == "final_message"
        last.truncated = stop_reason in CUT_BY_LIMIT
    fields = {**_row_fields(row), **answer}
    if response is not None and "response" not in answer:
        fields["response"] = response.model_dump(mode="json", exclude_none=True)
    fields.setdefault("terminated", stop_reason == "final_message")
    fields.setdefault("truncated", stop_reason in CUT_BY_LIMIT)
    fields["duration_s"] = duration_s
    for key, (value, model) in (sent or {}).items():
        if key in fields and _echoes(fields[key], value):  # echoed unchanged: the model it was dumped from
            fields[key] = model
    return _with_steps(fields, steps)


def _echoes(echo: Any, sent: Any) -> bool:
    """Whether ``echo`` is ``sent`` given back: equal, or spelling out as null a key the dump left out."""
    if echo == sent:
        return True
    if isinstance(echo, dict) and isinstance(sent, dict):
        return sent.keys() <= echo.keys() and all(
            _echoes(value, sent[key]) if key in sent else value is None for key, value in echo.items()
        )
    if isinstance(echo, list) and isinstance(sent, list):
        return len(echo) == len(sent) and all(map(_echoes, echo, sent))
    return False


def _with_steps(fields: dict[str, Any], steps: Sequence[StepRecord | dict[str, Any]]) -> Rollout:
    """The record of ``fields``, validated, holding ``steps`` as they are (built from validated items)."""
    fields["steps"] = []
    record = Rollout.model_validate(fields)
    record.steps = [s if type(s) is StepRecord else StepRecord.model_validate(s) for s in steps]
    return record


def from_transitions(
    params: ResponseCreateParams,
    response: NeMoGymResponse,
    steps: list[StepRecord],
    *,
    cut_by_limit: bool,
    duration_s: float,
    row: dict[str, Any] | None = None,
    last: Any = None,
) -> Rollout:
    """A Gymnasium episode: reward and rubric components summed over the steps, mask and failure from ``last``."""
    judgements: list[dict[str, Any]] = []
    if cut_by_limit and steps:
        steps[-1].truncated = True
    for s in steps:  # a rubric in step() sends its components in the step's info
        if s.reward_components is None and isinstance(s.info.get("reward_components"), dict):
            s.reward_components = s.info["reward_components"]
        if isinstance(s.info.get("judgements"), list):
            judgements.extend(s.info["judgements"])
    return _with_steps(
        {
            **_row_fields(row),
            "responses_create_params": params.model_dump(mode="json", exclude_none=True),
            "response": response.model_dump(mode="json", exclude_none=True),
            "reward": math.fsum(s.reward for s in steps),
            "terminated": bool(getattr(last, "terminated", False)),
            "truncated": bool(cut_by_limit or getattr(last, "truncated", False)),
            "info": getattr(last, "info", {}),
            "mask_sample": bool(getattr(last, "mask_sample", False)),
            "failure_kind": getattr(last, "failure_kind", None),
            "failure_reason": getattr(last, "failure_reason", None),
            "duration_s": duration_s,
            "reward_components": _summed_components(s.reward_components for s in steps),
            "judgements": judgements or None,
        },
        steps,
    )


def _summed_components(per_step: Iterable[dict[str, float | None] | None]) -> dict[str, float | None] | None:
    """Per-component sums over an episode's steps (None when no step had any; a failed judge's None stays None)."""
    total: dict[str, float | None] = {}
    for components in per_step:
        for name, value in (components or {}).items():
            before = total.get(name, 0.0)
            total[name] = None if before is None or value is None else before + float(value)
    return total or None


def failed(
    row: dict[str, Any], failure: Failure, *, duration_s: float = 0.0, steps: Sequence[StepRecord] = ()
) -> Rollout:
    """A masked record of an episode that could not finish, with the steps taken before the failure."""
    params = row.get("responses_create_params") or {"input": ""}
    return _with_steps(
        {
            **_row_fields(row),
            "responses_create_params": params,
            "response": NeMoGymResponse(output=[], status="failed").model_dump(mode="json", exclude_none=True),
            "reward": 0.0,
            "mask_sample": True,
            "failure_kind": failure.kind,
            "failure_reason": failure.message or failure.kind,
            "failure_stage": failure.stage,
            "failure_trace": failure.trace,
            "duration_s": duration_s,
        },
        [*(steps or failure.steps or ())],
    )


def identity(
    *, task_index: Any = None, repeat: Any = None, agent: str | dict[str, Any] | None = None, env: str | None = None
) -> dict[str, Any]:
    """A row's identity fields under the one set of names (None left out); ``agent``: a name or an ``agent_ref``."""
    if isinstance(agent, str):
        agent = {"type": "responses_api_agents", "name": agent}
    fields = {"_ng_task_index": task_index, "_ng_rollout_index": repeat, "agent_ref": agent, "env_name": env}
    return {k: v for k, v in fields.items() if v is not None}


def with_identity(
    record: Rollout | dict[str, Any],
    *,
    task_index: Any = None,
    repeat: Any = None,
    agent: str | None = None,
    env: str | None = None,
) -> Rollout:
    """``record`` with its row's identity (``identity``) set (None leaves a value as it is)."""
    update = identity(task_index=task_index, repeat=repeat, agent=agent, env=env)
    if isinstance(record, Rollout):
        return record.model_copy(update=update)
    return Rollout.model_validate({**record, **update})


def mean_reward(records: Iterable[Any]) -> float:
    """Mean reward of the unmasked records (nan when there are none): failures are masked, so never counted."""
    kept = [float(_get(r, "reward") or 0.0) for r in records if not _get(r, "mask_sample")]
    return math.fsum(kept) / len(kept) if kept else float("nan")


def mean_reward_text(mean: float) -> str:
    """``mean reward 0.500 over the unmasked``, or what stands in for a mean no episode has (never "nan")."""
    return f"mean reward {mean:.3f} over the unmasked" if mean == mean else "no mean reward (no unmasked episode)"


def failure_counts(records: Iterable[Any]) -> dict[str, int]:
    """Masked records by failure kind, most common first (a mask without a kind counts as ``masked``)."""
    counts = Counter(_get(r, "failure_kind") or "masked" for r in records if _get(r, "mask_sample"))
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def _get(record: Any, key: str) -> Any:
    return record.get(key) if isinstance(record, dict) else getattr(record, key, None)
