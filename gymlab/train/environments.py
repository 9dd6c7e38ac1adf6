"""TRL over a served seed/verify environment: ``environment_factory`` (one gymlab episode per rollout, one
method per tool route, the reward the server's verify of the transcript) and ``verify_reward`` (docs/train.md)."""

from __future__ import annotations

import inspect
import json
import threading
import types
import typing
import weakref
from typing import Any

from pydantic import BaseModel

from gymlab.errors import EpisodeError
from gymlab.models.chat_convert import chat_messages
from gymlab.protocol.resources import AgentRunRequest, dump_row
from gymlab.resources.tools import _body_model, tools_from
from gymlab.train.records import TrainingRun

ROW_COLUMN = "gymlab_row"  # the dataset column carrying a gymlab row (JSON) through TRL to ``reset(**row)``
_SCHEMA_TYPES = (str, int, float, bool, list, dict)


def trl_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """TRL dataset rows: ``prompt`` (the row's input as chat messages) and the row as JSON under ``gymlab_row``
    (an Arrow column holds one shape), also on the first message, where a ``rollout_func`` finds it."""
    out = []
    for index, row in enumerate(rows):
        request = AgentRunRequest.model_validate(row)
        row = {"_ng_task_index": index, **dump_row(request)}
        prompt = chat_messages(request.responses_create_params, f"rows[{index}]")
        text = json.dumps(row)
        prompt[0][ROW_COLUMN] = text  # chat templates ignore the key
        out.append({"prompt": prompt, ROW_COLUMN: text})
    return out


def row_of(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The gymlab row TRL passed back (``reset(**row)``, a reward function's columns)."""
    if ROW_COLUMN not in kwargs:
        raise KeyError(f"no {ROW_COLUMN!r} column: build the dataset with gymlab.train.trl_rows(rows)")
    return json.loads(kwargs[ROW_COLUMN])


def _hint(annotation: Any) -> Any:
    """The nearest type TRL can put in a tool schema (a nested model: ``dict``; anything unknown: ``str``)."""
    if annotation in _SCHEMA_TYPES or annotation is type(None):
        return annotation
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return annotation if all(isinstance(a, (str, int, float, bool)) for a in args) else str
    if origin is typing.Union or isinstance(annotation, types.UnionType):
        return typing.Union[tuple(_hint(a) for a in args)]  # noqa: UP007 (built from a tuple)
    if origin in (list, tuple, set, frozenset):
        return list[_hint(args[0])] if args else list
    if origin is dict:
        return dict
    return dict if isinstance(annotation, type) and issubclass(annotation, BaseModel) else str


def tool_method(name: str, description: str, model: type[BaseModel] | None):
    """A method calling tool route ``/{name}``: the request model's fields as its keyword parameters and
    its docstring's ``Args:``, as TRL reads them."""
    fields = model.model_fields if model is not None else {}
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    lines = [description or f"Call the {name} tool.", "", "Args:"] if fields else [description or name]
    for field_name, info in fields.items():
        hint = _hint(info.annotation)
        default = inspect.Parameter.empty if info.is_required() else info.get_default(call_default_factory=True)
        params.append(inspect.Parameter(field_name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint))
        annotations[field_name] = hint
        lines.append(f"    {field_name}: {(info.description or field_name).replace(chr(10), ' ')}")
    annotations["return"] = str

    def method(self, **arguments: Any) -> str:
        return self._call(name, arguments)

    method.__name__ = method.__qualname__ = name
    method.__doc__ = "\n".join(lines)
    method.__signature__ = inspect.Signature(params, return_annotation=str)
    method.__annotations__ = annotations
    return method


class Environments:
    """``environment_factory`` for ``GRPOTrainer`` over ``env`` (a seed/verify server served by ``lab``):
    ``GRPOTrainer(environment_factory=envs, reward_funcs=envs.reward, train_dataset=trl_rows(rows))``.
    ``close()`` releases every session still open; ``run`` receives each rollout's record as it is graded."""

    def __init__(self, lab: Any, env: Any, *, run: TrainingRun | None = None):
        if not hasattr(env.server, "verify"):
            raise TypeError(
                f"{env.name} is a Gymnasium server: train on it with gymlab.train.gymnasium_rollout_func, "
                "not an environment factory"
            )
        self.lab, self.env = lab, env
        self.run = run if run is not None else TrainingRun()
        self._instances: weakref.WeakSet = weakref.WeakSet()
        self._lock = threading.Lock()
        methods = {}
        for tool in tools_from(env.server):
            route = next(r for r in env.server.app.routes if getattr(r, "path", "") == f"/{tool['name']}")
            methods[tool["name"]] = tool_method(tool["name"], tool["description"], _body_model(route.endpoint))
        if clash := {"reset", "get_reward"} & set(methods):
            raise ValueError(f"{env.name}: tool route(s) {sorted(clash)} collide with TRL's environment methods")
        self.tool_names = sorted(methods)
        self.cls = type(f"{type(env.server).__name__}Environment", (EpisodeEnvironment,), methods)

    def __call__(self) -> EpisodeEnvironment:
        instance = self.cls(self)
        with self._lock:
            self._instances.add(instance)
        return instance

    @property
    def open_sessions(self) -> int:
        """Episodes seeded and not yet verified or released."""
        return sum(1 for e in list(self._instances) if e.episode is not None and not e.episode.done)

    def reward(self, completions: list[Any], environments: list[EpisodeEnvironment], **kwargs: Any) -> list:
        """TRL reward function: each rollout's final answer said, its transcript verified; None when masked."""
        step = getattr(kwargs.get("trainer_state"), "global_step", None)
        rewards = [env._grade(_final_text(c), step) for c, env in zip(completions, environments, strict=True)]
        self.run.log(kwargs.get("log_metric"))
        return rewards

    def close(self) -> None:
        """Release every episode still open (an interrupted rollout's); idempotent."""
        for instance in list(self._instances):
            instance._release()


def _final_text(completion: Any) -> str:
    """The last assistant message's text of a TRL completion (messages, or plain text)."""
    if isinstance(completion, str):
        return completion
    for message in reversed(completion or []):
        if message.get("role") == "assistant" and isinstance(message.get("content"), str):
            return message["content"]
    return ""


class EpisodeEnvironment:
    """One TRL environment instance: the gymlab episode of its current rollout (``episode``)."""

    def __init__(self, environments: Environments):
        self._environments = environments
        self.episode: Any = None
        self._seed_failure: BaseException | None = None

    def reset(self, **row: Any) -> str | None:
        """Seed a new episode of the row (the last one released); the seed's answer, if any, is the observation
        TRL appends. A failed seed leaves the rollout masked (its tools refuse, its reward is None)."""
        self._release()
        envs = self._environments
        self._seed_failure = None
        self.episode = envs.lab.episode(envs.env, row_of(row))
        try:
            answer = self.episode.seed()
        except Exception as exc:  # the rollout goes on; ``_grade`` records it masked
            self._seed_failure = exc
            return None
        return json.dumps(answer) if answer else None

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        if self.episode is None or self._seed_failure is not None:
            raise EpisodeError(f"{self._environments.env.name}: {name} called with no seeded episode")
        output = self.episode.call(name, **arguments)
        return output if isinstance(output, str) else json.dumps(output)

    def _grade(self, answer: str, step: int | None) -> float | None:
        """Say ``answer`` and verify; the record goes to the run; None when the episode is masked."""
        run, episode = self._environments.run, self.episode
        if episode is None:
            raise EpisodeError(f"{self._environments.env.name}: a reward asked before reset()")
        if self._seed_failure is not None:
            return run.fail(episode, self._seed_failure, "seed", step)
        return run.grade(episode, answer, step)

    def _release(self) -> None:
        if self.episode is not None and not self.episode.done:
            self.episode.close()  # a seed/verify episode is released by a verify of its transcript


environment_factory = Environments


def verify_reward(lab: Any, env: Any, *, run: TrainingRun | None = None):
    """A TRL reward function (named ``verify``) over ``trl_rows``: each completion one seeded, said and verified
    episode of ``env``; a masked one scores None (out of the loss); the records go to ``verify.run``."""
    run = run if run is not None else TrainingRun()

    def verify(completions: list[Any], **kwargs: Any) -> list[float | None]:
        step = getattr(kwargs.get("trainer_state"), "global_step", None)
        rows = kwargs.get("gymlab_row")
        if rows is None:
            row_of(kwargs)  # raises, naming the missing column
        rewards: list[float | None] = []
        for completion, row in zip(completions, rows, strict=True):
            with lab.episode(env, row_of({"gymlab_row": row})) as episode:
                try:
                    episode.seed()
                except Exception as exc:  # a seed that fails is masked like a failed verify
                    rewards.append(run.fail(episode, exc, "seed", step))
                    continue
                rewards.append(run.grade(episode, _final_text(completion), step))
        run.log(kwargs.get("log_metric"))
        return rewards

    verify.run = run
    return verify
