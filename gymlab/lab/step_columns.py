"""What a step's frame columns are: ``text``, ``action_type``, ``tool`` of an item or a step (the
episodes frame's answer and the steps of several items use them), and the steps frame's dtypes."""

from __future__ import annotations

from typing import Any

STEP_DTYPES = {
    "episode": "int64",
    "step": "int64",
    "action_type": "category",
    "tool": "category",
    "n_calls": "int64",
    "arguments": "str",
    "output": "str",
    "text": "str",
    "observation": "str",
    "reward": "float64",
    "cumulative_reward": "float64",
    "terminated": "bool",
    "truncated": "bool",
    "tool_errors": "int64",
    "duration_s": "float64",
}
STEP_COLUMNS = list(STEP_DTYPES)


# -- items --------------------------------------------------------


def item_text(item: dict[str, Any]) -> str | None:
    """A message item's text (its content string, or its parts' texts joined); None for other items."""
    if item.get("type", "message") != "message":
        return None
    content = item.get("content")
    if isinstance(content, str):
        return content
    return "".join(p.get("text") or "" for p in content or () if isinstance(p, dict))


def messages_text(items: list[dict[str, Any]], role: str | None = "assistant") -> str | None:
    """The text of ``items``' messages (of ``role``), one message a line; None when there is none."""
    texts = [
        t
        for i in items
        if isinstance(i, dict) and (role is None or i.get("role", "assistant") == role)
        for t in (item_text(i),)
        if t is not None
    ]
    return "\n".join(texts) if texts else None


def describe_action(items: list[dict[str, Any]]) -> tuple[str, str | None, str | None, int, str | None]:
    """(action type, first tool name, its arguments, number of calls, message text) of a step of several
    items (the steps frame reads a step of one item in Arrow). The type: the one kind of item besides
    reasoning, ``mixed`` (calls and messages) or ``other``."""
    found = {i.get("type", "message") for i in items}
    if len(found) > 1:
        found.discard("reasoning")
    kind = found.pop() if len(found) == 1 else "mixed" if {"function_call", "message"} <= found else "other"
    calls = [i for i in items if i.get("type") == "function_call"]
    first = calls[0] if calls else {}
    return kind, first.get("name"), first.get("arguments"), len(calls), messages_text(items, None)


def _categorical(values):
    """A Categorical with sorted categories from a pyarrow (chunked, dictionary) array; a null stays missing."""
    import numpy as np
    import pandas as pd
    import pyarrow as pa

    chunks = values.chunks if isinstance(values, pa.ChunkedArray) else [values]
    chunks = [c if pa.types.is_dictionary(c.type) else c.dictionary_encode() for c in chunks]
    if not chunks:
        return _no_categories(0)
    unified = pa.chunked_array(chunks).unify_dictionaries()
    names = unified.chunk(0).dictionary.to_pylist()
    if not names:
        return _no_categories(len(values))
    order = sorted(range(len(names)), key=names.__getitem__)
    rank = np.empty(len(names) + 1, dtype="int64")
    rank[order], rank[-1] = np.arange(len(names)), -1  # a null (index -1) stays missing
    indices = pa.concat_arrays([c.indices.cast(pa.int64()) for c in unified.chunks]).fill_null(-1)
    return pd.Categorical.from_codes(rank[indices.to_numpy()], [names[i] for i in order])


def _no_categories(n: int):
    """``n`` missing names: string categories, none of them (as a column of names with none set)."""
    import pandas as pd

    return pd.Categorical.from_codes([-1] * n, dtype=pd.CategoricalDtype(pd.Index([], dtype="str")))


def finish_steps(columns: dict[str, Any]):
    """The steps frame from its columns by name (numbers as numpy arrays, names and texts as pyarrow
    arrays), each as ``STEP_DTYPES`` says, and the cumulative reward of each episode."""
    import numpy as np
    import pandas as pd

    def typed(values: Any, dtype: str) -> Any:
        if dtype == "category":
            return _categorical(values)
        return pd.array(values, dtype="str") if dtype == "str" else np.asarray(values, dtype=dtype)

    frame = {name: typed(columns[name], dtype) for name, dtype in STEP_DTYPES.items() if name in columns}
    rewards = frame["reward"]
    frame["cumulative_reward"] = (
        pd.Series(rewards).groupby(frame["episode"]).cumsum().to_numpy() if len(rewards) else rewards
    )
    # the columns are new: no second copy of a million rows
    return pd.DataFrame(frame, columns=STEP_COLUMNS, copy=False)
