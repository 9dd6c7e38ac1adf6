"""Rows in the shapes the training libraries document (TRL, verl): ``FORMATS`` and docs/export.md."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gymlab.collection.readers import check_chat_messages, check_tools
from gymlab.export.ground_truth import GroundTruth, Rows, episode_where, ground_truth_of
from gymlab.export.rows import by_task, preference_pairs, select, with_tokens
from gymlab.models.chat_convert import chat_messages, chat_tools, prompt_items
from gymlab.protocol import Rollout


@dataclass
class Options:
    """Every export option; each format reads the ones it uses (``Format.options``)."""

    min_reward: float | None = None
    drop_masked: bool = True
    best_of_n: int | None = None
    min_margin: float = 0.0
    label_threshold: float = 1.0
    ground_truth: GroundTruth = None
    rows: Rows = None  # the dataset rows: the default ground truth is each task row's own fields
    data_source: str | None = None
    ability: str | None = None
    split: str = "train"
    tool_class: str = "verl.tools.base_tool.BaseTool"  # verl: each tool's class_name in the tool config


@dataclass
class Inputs:
    """Each task's own input fields (``ground_truth.inputs_by_task``), and where they were read."""

    by_task: dict[Any, dict[str, Any]] | None = None
    where: list[str] = field(default_factory=list)


@dataclass
class Built:
    """The rows of one export and what the card reports about them."""

    rows: list[dict[str, Any]]
    rewards: list[float]  # rewards of the episodes the rows came from
    counts: dict[str, int]
    ground_truth: str | None = None  # what the ground truth column holds, for the card


def tools_json(record: Rollout) -> str:
    """The request's tools as a JSON string of chat-format tool schemas (``[]`` when none)."""
    return json.dumps(chat_tools(record.responses_create_params.tools), ensure_ascii=False)


def _prompt(record: Rollout) -> list[dict[str, Any]]:
    return chat_messages(prompt_items(record.responses_create_params), episode_where(record))


def _completion(record: Rollout) -> list[dict[str, Any]]:
    return chat_messages(record.response.output, episode_where(record))


def _mean(values: list[float]) -> float | None:
    return math.fsum(values) / len(values) if values else None


def trl_sft(records: list[Rollout], o: Options) -> Built:
    kept = select(records, min_reward=o.min_reward, drop_masked=o.drop_masked, best_of_n=o.best_of_n)
    rows = [with_tokens({"messages": [*_prompt(r), *_completion(r)], "tools": tools_json(r)}, r) for r in kept]
    return Built(rows, [r.reward for r in kept], {"episodes_kept": len(kept)})


def trl_dpo(records: list[Rollout], o: Options) -> Built:
    pairing = preference_pairs(records, min_margin=o.min_margin)
    pairs = [(c, r) for c, r in pairing.pairs if o.min_reward is None or c.reward >= o.min_reward]
    rows = [
        {
            "prompt": _prompt(chosen),
            "chosen": _completion(chosen),
            "rejected": _completion(rejected),
            "tools": tools_json(chosen),
            "score_chosen": chosen.reward,
            "score_rejected": rejected.reward,
        }
        for chosen, rejected in pairs
    ]
    counts = {
        "pairs": len(pairs),
        "tasks_with_one_episode": pairing.single,
        "ties_dropped": pairing.ties,
        "below_margin_dropped": pairing.below_margin,
        "chosen_below_min_reward": len(pairing.pairs) - len(pairs),
    }
    return Built(rows, [r.reward for pair in pairs for r in pair], counts)


def trl_kto(records: list[Rollout], o: Options) -> Built:
    kept = select(records, min_reward=o.min_reward, drop_masked=o.drop_masked, best_of_n=o.best_of_n)
    rows = [
        with_tokens(
            {
                "prompt": _prompt(r),
                "completion": _completion(r),
                "label": r.reward >= o.label_threshold,
                "tools": tools_json(r),
                "reward": r.reward,
            },
            r,
        )
        for r in kept
    ]
    desirable = sum(row["label"] for row in rows)
    return Built(
        rows,
        [r.reward for r in kept],
        {"episodes_kept": len(kept), "desirable": desirable, "undesirable": len(rows) - desirable},
    )


def _tasks(records: list[Rollout], o: Options) -> list[tuple[int, Rollout, list[float], int]]:
    """(index, first record, unmasked rewards, episodes) per task of the kept records."""
    groups = by_task(select(records, drop_masked=o.drop_masked)).values()
    return [(i, group[0], [r.reward for r in group if not r.mask_sample], len(group)) for i, group in enumerate(groups)]


def trl_grpo(records: list[Rollout], o: Options, inputs: Inputs) -> Built:
    tasks = _tasks(records, o)
    rows = [
        {
            "prompt": _prompt(first),
            "ground_truth": ground_truth_of(first, o.ground_truth, inputs.by_task),
            "tools": tools_json(first),
            "reward_mean": _mean(rewards),
            "episodes": n,
        }
        for _, first, rewards, n in tasks
    ]
    return Built(rows, [x for _, _, rewards, _ in tasks for x in rewards], {"tasks": len(rows)})


def verl(records: list[Rollout], o: Options, inputs: Inputs) -> Built:
    tasks = _tasks(records, o)
    rows = [
        {
            "data_source": o.data_source or first.env or first.agent or "gymlab",
            "prompt": _prompt(first),
            "ability": o.ability or ("tool_use" if first.responses_create_params.tools else "chat"),
            "reward_model": {"style": "rule", "ground_truth": ground_truth_of(first, o.ground_truth, inputs.by_task)},
            "extra_info": {
                "index": index,
                "split": o.split,
                "task_index": first.task_index if isinstance(first.task_index, int) else None,
                "tools": tools_json(first),
                "reward_mean": _mean(rewards),
                "episodes": n,
            },
        }
        for index, first, rewards, n in tasks
    ]
    return Built(rows, [x for _, _, rewards, _ in tasks for x in rewards], {"tasks": len(rows)})


# -- the checks of a row as a reader gets it back; each raises ``ValueError`` saying why


def _messages(row: dict, key: str) -> None:
    value = row.get(key)
    if isinstance(value, list):  # Parquet and `datasets` give every struct field; a null one was absent
        value = [
            {k: v for k, v in m.items() if v is not None or k == "content"} if isinstance(m, dict) else m for m in value
        ]
    check_chat_messages(value, key)
    if not value:
        raise ValueError(f"{key} is empty: it needs at least one message")


def _tools(value: Any, key: str = "tools") -> None:
    if not isinstance(value, str):
        raise ValueError(f"{key} must be a JSON string of tool schemas, got {type(value).__name__}")
    try:
        tools = json.loads(value)
    except ValueError as exc:
        raise ValueError(f"{key} is not valid JSON: {exc}") from None
    check_tools(tools, key)


def _number(row: dict, key: str, *, optional: bool = False) -> float | None:
    value = row.get(key)
    if value is None and optional:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        raise ValueError(f"{key} must be a number, got {value!r}")
    return float(value)


def _string(row: dict, key: str, *, optional: bool = False) -> None:
    if not isinstance(row.get(key), str) and not (optional and row.get(key) is None):
        raise ValueError(f"{key} must be a string{' or null' * optional}, got {row.get(key)!r:.80}")


def _token_turns(row: dict) -> None:
    """An episode's ``token_turns``, when it has them: per model turn, token ids and one logprob per token."""
    turns = row.get("token_turns")
    if turns is None:
        return
    if not isinstance(turns, list):
        raise ValueError(f"token_turns must be a list, got {type(turns).__name__}")
    for n, turn in enumerate(turns):
        ids, logprobs = (turn or {}).get("generation_token_ids"), (turn or {}).get("generation_log_probs")
        if not isinstance(ids, list) or not isinstance(logprobs, list) or len(ids) != len(logprobs):
            raise ValueError(f"token_turns[{n}] needs generation_token_ids and as many generation_log_probs")


def check_sft(row: dict) -> None:
    _token_turns(row)
    _messages(row, "messages")
    if not any(m.get("role") == "assistant" for m in row["messages"]):
        raise ValueError("messages has no assistant message: nothing to train on")
    _tools(row.get("tools"))


def check_dpo(row: dict) -> None:
    for key in ("prompt", "chosen", "rejected"):
        _messages(row, key)
    _tools(row.get("tools"))
    chosen, rejected = _number(row, "score_chosen"), _number(row, "score_rejected")
    if not chosen > rejected:
        raise ValueError(f"score_chosen {chosen} is not above score_rejected {rejected}")


def check_kto(row: dict) -> None:
    _token_turns(row)
    _messages(row, "prompt")
    _messages(row, "completion")
    if not isinstance(row.get("label"), bool):
        raise ValueError(f"label must be true or false, got {row.get('label')!r}")
    _tools(row.get("tools"))
    _number(row, "reward")


def check_grpo(row: dict) -> None:
    _messages(row, "prompt")
    _string(row, "ground_truth", optional=True)  # null: a task row without fields of its own
    _tools(row.get("tools"))
    _number(row, "reward_mean", optional=True)


def check_verl(row: dict) -> None:
    _string(row, "data_source")
    _messages(row, "prompt")
    _string(row, "ability")
    reward_model = row.get("reward_model")
    if not isinstance(reward_model, dict) or not isinstance(reward_model.get("style"), str):
        raise ValueError(f"reward_model must be {{style, ground_truth}}, got {reward_model!r:.80}")
    _string(reward_model, "ground_truth", optional=True)
    extra = row.get("extra_info")
    if not isinstance(extra, dict) or not isinstance(extra.get("index"), int):
        raise ValueError(f"extra_info must be an object with an integer index, got {extra!r:.80}")
    _tools(extra.get("tools"), "extra_info.tools")


@dataclass(frozen=True)
class Format:
    """One export format: its builder, the options it reads, its columns and where they are documented."""

    name: str
    title: str
    docs: str
    build: Callable[..., Built]  # (records, options) -> Built; with "rows" among its options, also Inputs
    check: Callable[[dict], None]
    options: frozenset[str]
    columns: dict[str, str]


_TRL = "https://huggingface.co/docs/trl/dataset_formats"
_VERL = "https://verl.readthedocs.io/en/latest/preparation/prepare_data.html"
_FILTERS = frozenset({"min_reward", "drop_masked", "best_of_n"})

FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format(
            "trl-sft",
            "TRL SFT: conversational language modeling with tool calling",
            _TRL + "#tool-calling",
            trl_sft,
            check_sft,
            _FILTERS,
            {"messages": "the whole episode, prompt included", "tools": "JSON string: the tool schemas"},
        ),
        Format(
            "trl-dpo",
            "TRL DPO: preference, conversational, explicit prompt",
            _TRL + "#preference",
            trl_dpo,
            check_dpo,
            frozenset({"min_reward", "min_margin"}),
            {
                "prompt": "the request's messages",
                "chosen": "the best episode's messages",
                "rejected": "the worst episode's messages",
                "tools": "JSON string: the tool schemas",
                "score_chosen": "reward of the chosen episode",
                "score_rejected": "reward of the rejected episode",
            },
        ),
        Format(
            "trl-kto",
            "TRL KTO: unpaired preference, conversational",
            _TRL + "#unpaired-preference",
            trl_kto,
            check_kto,
            _FILTERS | {"label_threshold"},
            {
                "prompt": "the request's messages",
                "completion": "the episode's messages",
                "label": "reward at or above the label threshold",
                "tools": "JSON string: the tool schemas",
                "reward": "the episode's reward",
            },
        ),
        Format(
            "trl-grpo",
            "TRL GRPO: prompt-only, one row per task, with its ground truth",
            _TRL + "#prompt-only",
            trl_grpo,
            check_grpo,
            frozenset({"drop_masked", "ground_truth", "rows"}),
            {
                "prompt": "the request's messages",
                "ground_truth": "string: the task's ground truth (reaches reward functions as a keyword); null: none",
                "tools": "JSON string: the tool schemas",
                "reward_mean": "mean reward of the task's collected unmasked episodes",
                "episodes": "how many episodes of the task were collected",
            },
        ),
        Format(
            "verl",
            "verl: RL prompt rows (Parquet), one per task",
            _VERL,
            verl,
            check_verl,
            frozenset({"drop_masked", "ground_truth", "rows", "data_source", "ability", "split", "tool_class"}),
            {
                "data_source": "dataset name; picks verl's reward function (default: the environment)",
                "prompt": "the request's messages",
                "ability": "task category",
                "reward_model": "{style: 'rule', ground_truth: string (null: none)}",
                "extra_info": "{index, split, task_index, tools (JSON string), reward_mean, episodes}",
            },
        ),
    )
}


#: The columns that tell each format, asked in this order (a verl row also has a ground truth).
_TELLING = (
    ("trl-sft", {"messages"}),
    ("trl-dpo", {"chosen", "rejected"}),
    ("trl-kto", {"label"}),
    ("verl", {"data_source", "reward_model"}),
    ("trl-grpo", {"ground_truth"}),
)


def format_of(columns: set[str]) -> str | None:
    """Which trainer format a set of columns is (None: none of them)."""
    return next((name for name, telling in _TELLING if telling <= columns), None)
