"""Rows in the shapes the training libraries document (TRL, verl): ``FORMATS`` and docs/export.md."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gymlab.collection.readers import check_chat_messages, check_tools
from gymlab.export.ground_truth import GroundTruth, Inputs, Rows, described, episode_where, ground_truth_of
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


def _per_episode(records: list[Rollout], o: Options, row: Callable[[Rollout], dict]) -> Built:
    """One row per kept episode, with its ``token_turns`` when it kept them."""
    kept = select(records, min_reward=o.min_reward, drop_masked=o.drop_masked, best_of_n=o.best_of_n)
    rows = [with_tokens(row(r), r) for r in kept]
    return Built(rows, [r.reward for r in kept], {"episodes_kept": len(kept)})


def _per_task(records: list[Rollout], o: Options, inputs: Inputs, row: Callable[..., dict]) -> Built:
    """One row per task of the kept episodes: ``row(index, first record, ground truth, reward stats)``."""
    rows, rewards = [], []
    for index, group in enumerate(by_task(select(records, drop_masked=o.drop_masked)).values()):
        kept = [r.reward for r in group if not r.mask_sample]
        stats = {"reward_mean": math.fsum(kept) / len(kept) if kept else None, "episodes": len(group)}
        rows.append(row(index, group[0], ground_truth_of(group[0], o.ground_truth, inputs), stats))
        rewards += kept
    return Built(rows, rewards, {"tasks": len(rows)}, described(o.ground_truth, inputs))


def trl_sft(records: list[Rollout], o: Options, inputs: Inputs) -> Built:
    return _per_episode(records, o, lambda r: {"messages": [*_prompt(r), *_completion(r)], "tools": tools_json(r)})


def trl_dpo(records: list[Rollout], o: Options, inputs: Inputs) -> Built:
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


def trl_kto(records: list[Rollout], o: Options, inputs: Inputs) -> Built:
    def row(r: Rollout) -> dict:
        label = r.reward >= o.label_threshold
        return {
            "prompt": _prompt(r),
            "completion": _completion(r),
            "label": label,
            "tools": tools_json(r),
            "reward": r.reward,
        }

    built = _per_episode(records, o, row)
    desirable = sum(kto["label"] for kto in built.rows)
    built.counts.update(desirable=desirable, undesirable=len(built.rows) - desirable)
    return built


def trl_grpo(records: list[Rollout], o: Options, inputs: Inputs) -> Built:
    def row(index: int, first: Rollout, truth: str | None, stats: dict) -> dict:
        return {"prompt": _prompt(first), "ground_truth": truth, "tools": tools_json(first), **stats}

    return _per_task(records, o, inputs, row)


def verl(records: list[Rollout], o: Options, inputs: Inputs) -> Built:
    def row(index: int, first: Rollout, truth: str | None, stats: dict) -> dict:
        task_index = first.task_index if isinstance(first.task_index, int) else None
        return {
            "data_source": o.data_source or first.env or first.agent or "gymlab",
            "prompt": _prompt(first),
            "ability": o.ability or ("tool_use" if first.responses_create_params.tools else "chat"),
            "reward_model": {"style": "rule", "ground_truth": truth},
            "extra_info": {
                "index": index,
                "split": o.split,
                "task_index": task_index,
                "tools": tools_json(first),
                **stats,
            },
        }

    return _per_task(records, o, inputs, row)


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


def _tools(row: dict, key: str = "tools", label: str = "tools") -> None:
    value = row.get(key)
    if not isinstance(value, str):
        raise ValueError(f"{label} must be a JSON string of tool schemas, got {type(value).__name__}")
    try:
        tools = json.loads(value)
    except ValueError as exc:
        raise ValueError(f"{label} is not valid JSON: {exc}") from None
    check_tools(tools, label)


#: A scalar column's kind (``?``: or null) -> its test and what it must be.
_SCALARS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "str": (lambda v: isinstance(v, str), "a string"),
    "float": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and not math.isnan(v), "a number"),
    "bool": (lambda v: isinstance(v, bool), "true or false"),
}


def _scalar(row: dict, key: str, kind: str) -> None:
    test, what = _SCALARS[kind.rstrip("?")]
    value, optional = row.get(key), kind.endswith("?")
    if not test(value) and not (optional and value is None):
        raise ValueError(f"{key} must be {what}{' or null' * optional}, got {value!r:.80}")


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


def _has_assistant(row: dict) -> None:
    if not any(m.get("role") == "assistant" for m in row["messages"]):
        raise ValueError("messages has no assistant message: nothing to train on")


def _scores_ordered(row: dict) -> None:
    if not row["score_chosen"] > row["score_rejected"]:
        raise ValueError(f"score_chosen {row['score_chosen']} is not above score_rejected {row['score_rejected']}")


def _verl_nested(row: dict) -> None:
    reward_model = row.get("reward_model")
    if not isinstance(reward_model, dict) or not isinstance(reward_model.get("style"), str):
        raise ValueError(f"reward_model must be {{style, ground_truth}}, got {reward_model!r:.80}")
    _scalar(reward_model, "ground_truth", "str?")
    extra = row.get("extra_info")
    if not isinstance(extra, dict) or not isinstance(extra.get("index"), int):
        raise ValueError(f"extra_info must be an object with an integer index, got {extra!r:.80}")
    _tools(extra, "tools", "extra_info.tools")


@dataclass(frozen=True)
class Format:
    """One export format: its builder, the options it reads, its columns (name -> kind, what) and docs."""

    name: str
    title: str
    docs: str
    build: Callable[[list[Rollout], Options, Inputs], Built]
    options: frozenset[str]
    columns: dict[str, tuple[str, str]]
    extra: Callable[[dict], None] | None = None  # a check across columns, after each column's own

    def check(self, row: dict) -> None:
        """Raise ``ValueError`` unless ``row`` is a row of this format (absent keys as nulls)."""
        missing = [c for c in self.columns if c not in row]
        if missing:
            raise ValueError(f"no {missing[0]!r}")
        _token_turns(row)
        for key, (kind, _) in self.columns.items():
            if kind.rstrip("?") in _SCALARS:
                _scalar(row, key, kind)
            elif kind in ("messages", "tools"):
                {"messages": _messages, "tools": _tools}[kind](row, key)
        if self.extra is not None:
            self.extra(row)


_TRL = "https://huggingface.co/docs/trl/dataset_formats"
_VERL = "https://verl.readthedocs.io/en/latest/preparation/prepare_data.html"
_FILTERS = frozenset({"min_reward", "drop_masked", "best_of_n"})
_TOOLS = ("tools", "JSON string: the tool schemas")
_PROMPT = ("messages", "the request's messages")

FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format(
            "trl-sft",
            "TRL SFT: conversational language modeling with tool calling",
            _TRL + "#tool-calling",
            trl_sft,
            _FILTERS,
            {"messages": ("messages", "the whole episode, prompt included"), "tools": _TOOLS},
            _has_assistant,
        ),
        Format(
            "trl-dpo",
            "TRL DPO: preference, conversational, explicit prompt",
            _TRL + "#preference",
            trl_dpo,
            frozenset({"min_reward", "min_margin"}),
            {
                "prompt": _PROMPT,
                "chosen": ("messages", "the best episode's messages"),
                "rejected": ("messages", "the worst episode's messages"),
                "tools": _TOOLS,
                "score_chosen": ("float", "reward of the chosen episode"),
                "score_rejected": ("float", "reward of the rejected episode"),
            },
            _scores_ordered,
        ),
        Format(
            "trl-kto",
            "TRL KTO: unpaired preference, conversational",
            _TRL + "#unpaired-preference",
            trl_kto,
            _FILTERS | {"label_threshold"},
            {
                "prompt": _PROMPT,
                "completion": ("messages", "the episode's messages"),
                "label": ("bool", "reward at or above the label threshold"),
                "tools": _TOOLS,
                "reward": ("float", "the episode's reward"),
            },
        ),
        Format(
            "trl-grpo",
            "TRL GRPO: prompt-only, one row per task, with its ground truth",
            _TRL + "#prompt-only",
            trl_grpo,
            frozenset({"drop_masked", "ground_truth", "rows"}),
            {
                "prompt": _PROMPT,
                "ground_truth": (
                    "str?",  # null: a task row without fields of its own
                    "string: the task's ground truth (reaches reward functions as a keyword); null: none",
                ),
                "tools": _TOOLS,
                "reward_mean": ("float?", "mean reward of the task's collected unmasked episodes"),
                "episodes": ("int", "how many episodes of the task were collected"),
            },
        ),
        Format(
            "verl",
            "verl: RL prompt rows (Parquet), one per task",
            _VERL,
            verl,
            frozenset({"drop_masked", "ground_truth", "rows", "data_source", "ability", "split", "tool_class"}),
            {
                "data_source": ("str", "dataset name; picks verl's reward function (default: the environment)"),
                "prompt": _PROMPT,
                "ability": ("str", "task category"),
                "reward_model": ("reward_model", "{style: 'rule', ground_truth: string (null: none)}"),
                "extra_info": ("extra_info", "{index, split, task_index, tools (JSON string), reward_mean, episodes}"),
            },
            _verl_nested,
        ),
    )
}


def format_of(columns: set[str]) -> str | None:
    """Which trainer format a set of columns is: the first holding a column no other format has (None: none)."""
    for name, fmt in FORMATS.items():
        others = {c for other in FORMATS.values() if other is not fmt for c in other.columns}
        if columns & (fmt.columns.keys() - others):
            return name
    return None
