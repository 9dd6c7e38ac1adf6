"""Rows in the shapes the training libraries document (TRL, verl): ``FORMATS`` and docs/export.md."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gymlab.export.filters import by_task, preference_pairs, select
from gymlab.export.ground_truth import GroundTruth, Rows, episode_where, ground_truth_of
from gymlab.export.rows import token_turns
from gymlab.export.verl_tools import DEFAULT_TOOL_CLASS
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
    tool_class: str = DEFAULT_TOOL_CLASS  # verl: the class_name of each tool in the tool config


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


def _with_tokens(row: dict[str, Any], record: Rollout) -> dict[str, Any]:
    """``row`` with the episode's ``token_turns`` when its model server kept the tokens (docs/export.md)."""
    if turns := token_turns(record):
        row["token_turns"] = turns
    return row


def trl_sft(records: list[Rollout], o: Options) -> Built:
    kept = select(records, min_reward=o.min_reward, drop_masked=o.drop_masked, best_of_n=o.best_of_n)
    rows = [_with_tokens({"messages": [*_prompt(r), *_completion(r)], "tools": tools_json(r)}, r) for r in kept]
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
        _with_tokens(
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
    kept = select(records, drop_masked=o.drop_masked)
    out = []
    for index, group in enumerate(by_task(kept).values()):
        out.append((index, group[0], [r.reward for r in group if not r.mask_sample], len(group)))
    return out


def trl_grpo(records: list[Rollout], o: Options, inputs: Inputs | None = None) -> Built:
    inputs = inputs or Inputs()
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


def verl(records: list[Rollout], o: Options, inputs: Inputs | None = None) -> Built:
    inputs = inputs or Inputs()
    tasks = _tasks(records, o)
    rows = []
    for index, first, rewards, n in tasks:
        rows.append(
            {
                "data_source": o.data_source or first.env or first.agent or "gymlab",
                "prompt": _prompt(first),
                "ability": o.ability or ("tool_use" if first.responses_create_params.tools else "chat"),
                "reward_model": {
                    "style": "rule",
                    "ground_truth": ground_truth_of(first, o.ground_truth, inputs.by_task),
                },
                "extra_info": {
                    "index": index,
                    "split": o.split,
                    "task_index": first.task_index if isinstance(first.task_index, int) else None,
                    "tools": tools_json(first),
                    "reward_mean": _mean(rewards),
                    "episodes": n,
                },
            }
        )
    return Built(rows, [x for _, _, rewards, _ in tasks for x in rewards], {"tasks": len(rows)})


@dataclass(frozen=True)
class Format:
    """One export format: its builder, the options it reads, its columns and where they are documented."""

    name: str
    title: str
    docs: str
    build: Callable[..., Built]  # (records, options) -> Built; with "rows" among its options, also Inputs
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
            _FILTERS,
            {"messages": "the whole episode, prompt included", "tools": "JSON string: the tool schemas"},
        ),
        Format(
            "trl-dpo",
            "TRL DPO: preference, conversational, explicit prompt",
            _TRL + "#preference",
            trl_dpo,
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
