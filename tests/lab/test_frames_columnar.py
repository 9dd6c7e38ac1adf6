"""The columnar data side: the steps frame through Arrow (whatever shape the records' steps take,
kept or read again), and ``Rollouts`` holding JSON lines, validated when used,
with bad lines reported by number."""

import json
import sys

import pytest

from benchmarks.records import synthetic
from gymlab import DatasetError, Lab
from gymlab.examples import example_rows, load_environment
from gymlab.lab import columnar
from gymlab.lab.columnar import STEP_COLUMNS
from gymlab.lab.frames import episodes_frame, steps_frame
from gymlab.lab.runs import Rollouts
from gymlab.lab.store import RecordStore, StoreBuilder
from gymlab.protocol import Rollout


@pytest.fixture(scope="module")
def collected():
    """Calculator (tool call, then a final message) and blackjack (observations, per-step rewards)."""
    calculator, blackjack = load_environment("calculator"), load_environment("blackjack")
    with Lab() as lab:
        calc = lab.serve_agent(
            "simple_agent", resources=lab.serve(calculator.CalculatorServer), model=lab.serve_model(calculator.policy)
        )
        bj = lab.serve_agent(
            "gymnasium_agent",
            name="bj_agent",
            resources=lab.serve(blackjack.BlackjackEnv),
            model=lab.serve_model(blackjack.policy, name="bj_policy"),
        )
        yield lab.run_many(calc, example_rows("calculator"), repeats=2) + lab.run_many(
            bj, example_rows("blackjack"), repeats=2
        )


def _record(steps, **fields):
    return {
        "responses_create_params": {"input": "q"},
        "response": {"output": []},
        "reward": 1.0,
        "steps": steps,
        **fields,
    }


#: Steps the single-item fast path cannot read directly: several items, reasoning, no items, a
#: missing output, a message made of several parts.
ODD_STEPS = [
    {
        "index": 0,
        "action": [
            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
            {"type": "function_call", "name": "a", "arguments": "{}", "call_id": "1"},
            {"type": "function_call", "name": "b", "arguments": '{"x": 1}', "call_id": "2"},
        ],
        "tool_outputs": [
            {"type": "function_call_output", "call_id": "1", "output": "one"},
            {"type": "function_call_output", "call_id": "2", "output": "two"},
        ],
        "reward": 0.5,
    },
    {"index": 1, "action": [], "observation": "nothing happened"},
    {
        "index": 2,
        "action": [
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Hel"}, {"text": "lo"}],
            },
            {"type": "function_call", "name": "c", "arguments": "{}", "call_id": "3"},
        ],
        "terminated": True,
        "reward": 1,
    },
    {"index": 3, "action": [{"type": "reasoning", "summary": []}], "truncated": True, "duration_s": 0.25},
]


def test_the_steps_frame_of_collected_runs_is_read_once_and_kept(collected):
    frame = collected.steps_frame(full=True)
    assert list(frame.columns) == STEP_COLUMNS
    steps = [(e, s.index, s.reward) for e, r in enumerate(collected) for s in r.steps]
    assert list(zip(frame["episode"], frame["step"], frame["reward"])) == steps
    assert set(frame["tool"].dropna()) == {"square", "hit", "stand"}
    calc = frame[frame["tool"] == "square"]
    assert (calc["action_type"] == "function_call").all() and calc["output"].str.contains("result").all()
    assert collected.store.columns is not None  # the Arrow columns read are kept...
    assert collected.steps_frame(full=True).equals(frame)  # ...and the same frame is built from them
    assert Rollouts(collected.store.lines()).steps_frame(full=True).equals(frame)  # as when read afresh


def test_odd_steps_are_described_in_full():
    records = Rollouts([_record(ODD_STEPS), _record([]), _record(ODD_STEPS[1:2])])
    pure = records.steps_frame(full=True)
    first = pure.iloc[0]
    assert (first["action_type"], first["tool"], first["n_calls"], first["output"]) == (
        "function_call",
        "a",
        2,
        "one\ntwo",
    )
    assert pure["action_type"].tolist() == ["function_call", "empty", "mixed", "reasoning", "empty"]
    assert pure["text"].iloc[2] == "Hello"
    assert pure["episode"].tolist() == [0, 0, 0, 0, 2]
    assert pure["cumulative_reward"].tolist() == [0.5, 0.5, 1.5, 1.5, 0.0]


def test_records_the_schema_does_not_fit_as_written_are_rewritten_to_fit():
    # A message whose content is a string (valid for the protocol) does not fit the Arrow schema.
    step = {"index": 0, "action": [{"type": "message", "role": "assistant", "content": "plain"}]}
    store = RecordStore.from_records([_record(ODD_STEPS), _record([step])])
    frame = steps_frame(store, full=True)
    assert frame["text"].tolist()[-1:] == ["plain"] and frame["action_type"].tolist()[-1:] == ["message"]
    assert frame["episode"].tolist() == [0, 0, 0, 0, 1] and store.columns.num_rows == 2


def test_a_step_of_another_type_or_without_its_index_names_its_line(tmp_path):
    path = tmp_path / "r.jsonl"
    good = json.dumps(_record(ODD_STEPS))
    for steps, where in (
        ([{"index": "first", "action": []}], r"steps\.0\.index"),
        ([{"action": []}], r"steps\.0\.index"),
        ("not a list", "steps"),
        ([{"index": 0, "action": "speak"}], r"steps\.0\.action"),
        ([{"index": 0, "action": [{"type": "message", "content": 7}]}], r"steps\.0\.action\.0"),
    ):
        path.write_text(f"{good}\n{json.dumps(_record(steps))}\n")
        with pytest.raises(DatasetError, match=rf"r\.jsonl:2: not a rollout record: {where}"):
            Rollouts.load(path).steps_frame()


def test_rollouts_hold_json_and_validate_each_record_when_used(tmp_path, collected):
    path = collected.save(tmp_path / "run.jsonl")
    loaded = Rollouts.load(path)
    assert loaded.store.buffer == path.read_bytes()  # held as the file's bytes, not as models
    assert isinstance(loaded[0], Rollout) and [r.reward for r in loaded] == [r.reward for r in collected]
    assert loaded[-1] == collected[-1] and len(loaded[1:3]) == 2 and loaded[1:3][0] == collected[1]
    lines = path.read_bytes().splitlines()
    broken = json.loads(lines[2])
    broken["steps"] = "not a list"
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\n".join([lines[0], b"", lines[1], json.dumps(broken).encode(), *lines[3:]]) + b"\n")
    lazy = Rollouts.load(bad)  # nothing parsed yet: loading a bad file succeeds
    assert len(lazy) == len(collected) and lazy[0].reward == collected[0].reward
    with pytest.raises(DatasetError, match=r"bad\.jsonl:4: not a rollout record: steps: ") as info:
        _ = lazy[2]  # the blank line 2 is skipped, the record's own line number is given
    assert info.value.line == 4
    with pytest.raises(DatasetError, match=r"bad\.jsonl:4"):
        list(lazy)
    assert lazy[1:].store.where(1) == (str(bad), 4)  # a slice keeps its records' line numbers
    with pytest.raises(DatasetError, match=r"^records:2: not a rollout record: response"):
        _ = Rollouts([_record([]), {"reward": 1.0}])[1]  # records built in memory: their position


def _spelled(steps, *, before=None, after=None, response=None, separators=(", ", ": ")):
    """A record's JSON line with ``before`` keys ahead of everything and ``after`` keys after its steps."""
    record = {**(before or {}), "responses_create_params": {"input": "q"}, "response": response or {"output": []}}
    return json.dumps({**record, "steps": steps, **(after or {})}, separators=separators)


#: Lines whose steps key is not where the reader is given a record from, or is spelled otherwise: each
#: gives the frame of its plain record (the steps reader cuts a record at its own steps key only).
ODD_LINES = {
    "json.dumps spacing": _spelled(ODD_STEPS),
    "compact": _spelled(ODD_STEPS, separators=(",", ":")),
    "a steps key nested before": _spelled(ODD_STEPS, before={"meta": {"steps": [{"index": 9}]}}),
    "a steps key inside the response": _spelled(ODD_STEPS, response={"output": [], "steps": [{"index": 9}]}),
    "keys inside a string": _spelled(ODD_STEPS, before={"note": 'say "steps": [1], "response": {}'}),
    "steps before the response": json.dumps({"steps": ODD_STEPS, "response": {"output": []}}),
    "a response key after the steps": _spelled(ODD_STEPS, after={"more": {"response": 1}}),
    "blanks before the key": _spelled(ODD_STEPS).replace(', "steps"', ' ,\t "steps"'),
}


@pytest.mark.parametrize("kind", list(ODD_LINES))
def test_a_record_is_read_from_its_own_steps_key_only(tmp_path, kind):
    path = tmp_path / "r.jsonl"
    line = ODD_LINES[kind]
    plain = _spelled(ODD_STEPS, separators=(",", ":"))
    path.write_text(f"{plain}\n{line}\n{plain}\n")
    expected = Rollouts([_record(ODD_STEPS)] * 3).steps_frame(full=True)
    assert Rollouts.load(path).steps_frame(full=True).equals(expected)  # the keys found on loading
    held = Rollouts([plain.encode(), line.encode(), plain.encode()])  # found by the reader
    assert held.steps_frame(full=True).equals(expected)
    builder = StoreBuilder(3)  # a run's records
    for position, text in enumerate([plain, line, plain]):
        builder.add(position, text.encode())
    assert Rollouts(store=builder.finish()).steps_frame(full=True).equals(expected)


def test_the_reader_is_given_a_record_from_its_steps_key_when_its_response_comes_before():
    for kind, cut in (("compact", True), ("json.dumps spacing", True), ("steps before the response", False)):
        line = ODD_LINES[kind].encode() + b"\n"
        given = columnar._cut(line, [0, len(line)])
        assert given == (b'{"response":{},' + line[line.index(b'"steps"') :] if cut else line), kind


def test_a_line_of_two_records_is_not_read_as_two(tmp_path):
    path = tmp_path / "r.jsonl"
    one = _spelled(ODD_STEPS, separators=(",", ":"))
    path.write_text(f"{one}\n{one} {one}\n")
    with pytest.raises(DatasetError, match=r"r\.jsonl:2: not valid JSON"):
        Rollouts.load(path).steps_frame()


def test_episodes_frame_takes_records_or_models_alike(collected):
    assert (
        episodes_frame(list(collected), full=True)
        .drop(columns="duration_s")
        .equals(collected.episodes_frame(full=True).drop(columns="duration_s"))
    )


def test_a_bad_line_in_a_frame_is_reported_with_its_number(tmp_path):
    good = synthetic(1, 2)[0].model_dump_json()
    path = tmp_path / "r.jsonl"
    path.write_text(f"{good}\n{good}\n[1, 2]\n")
    with pytest.raises(DatasetError, match=r"r\.jsonl:3: not a rollout record"):
        Rollouts.load(path).steps_frame()


def test_a_large_runs_summary():
    records = [
        _record([], reward=1),
        _record(ODD_STEPS, reward=0.5),
        {**_record([]), "mask_sample": True, "failure_kind": "verifier_error", "reward": 0.0},
        {**_record([]), "mask_sample": True},
        {"responses_create_params": {"input": "q"}, "response": {}},
    ] * 250
    big = Rollouts(store=RecordStore.from_records(records))
    assert (
        repr(big)
        == "<Rollouts 1250 episodes, mean reward 0.500 over the unmasked, 500 masked (masked 250, verifier_error 250)>"
    )
    assert big.n_steps == 250 * len(ODD_STEPS)


def test_a_record_longer_than_a_read_block_is_read():
    long_text = "x" * (40 << 20)  # 40 MB: more than pyarrow's 16 MB block
    step = {"index": 0, "action": [{"type": "message", "content": [{"type": "output_text", "text": long_text}]}]}
    store = RecordStore.from_records([_record([step]), _record([])])
    assert columnar.steps_frame_arrow(store)["text"].str.len().tolist() == [len(long_text)]


#: Steps at the edges of the schema: a message without content, a call without a name, an output
#: without its text, text outside ASCII, and steps whose tool names are all missing.
EDGE_STEPS = [
    {"index": 0, "action": [{"type": "message", "role": "assistant"}], "observation": "ünïcode ✓"},
    {"index": 1, "action": [{"type": "function_call", "arguments": "{}", "call_id": "1"}]},
    {
        "index": 2,
        "action": [{"type": "function_call", "name": "f", "arguments": "{}", "call_id": "2"}],
        "tool_outputs": [{"type": "function_call_output", "call_id": "2"}],
        "tool_errors": 1,
    },
    {"index": 3, "action": [{"type": "message", "content": [{"type": "output_text", "text": "dé 🎲"}]}], "reward": 1},
]
MASKED = {**_record([]), "mask_sample": True, "failure_kind": "verifier_error", "reward": 0.0}


@pytest.mark.parametrize(
    "records",
    [
        [_record(EDGE_STEPS)],
        [_record([EDGE_STEPS[0]]), _record([EDGE_STEPS[3]])],  # no step names a tool
        [MASKED, _record(EDGE_STEPS), {**_record([]), "mask_sample": True}],
        [_record([{**EDGE_STEPS[2], "reward_components": {"exact": 1.0}}]), _record(EDGE_STEPS)],  # a rubric
        [{**_record(EDGE_STEPS), "reward_components": {"exact": 1.0}}],  # the episode's own: no step column
    ],
    ids=["edge-steps", "no-tool-names", "masked-and-failed", "step-components", "episode-components"],
)
def test_edge_records_give_their_values_and_missing_ones(records):
    rollouts = Rollouts(records)
    pure = rollouts.steps_frame(full=True)
    assert pure["step"].tolist() == [s["index"] for r in records for s in r["steps"]]
    if records[0] is MASKED:
        assert pure["episode"].tolist() == [1, 1, 1, 1]
    edge = pure[pure["episode"] == pure["episode"].iloc[-1]].tail(4).reset_index(drop=True)
    if len(edge) == 4:
        assert edge["action_type"].tolist() == ["message", "function_call", "function_call", "message"]
        assert edge["tool"].tolist()[2] == "f" and edge["tool"].isna().tolist() == [True, True, False, True]
        assert edge["text"].tolist()[0::3] == ["", "dé 🎲"] and edge["text"].isna().tolist()[1:3] == [True, True]
        assert edge["output"].isna().all() and edge["observation"].tolist()[0] == "ünïcode ✓"
        assert edge["tool_errors"].tolist() == [0, 0, 1, 0] and edge["cumulative_reward"].tolist() == [0, 0, 0, 1]
    step_rubric = "reward_components" in (records[0]["steps"] or [{}])[0]
    if step_rubric:
        assert pure["reward_exact"].tolist()[:1] == [1.0] and pure["reward_exact"].isna().tolist()[1:] == [True] * 4
    else:  # an episode's own components make no step column
        assert not [c for c in pure if c.startswith("reward_") and c != "reward"]
    assert rollouts.store.columns is not None


def _many_records():
    return [_record(ODD_STEPS), _record(EDGE_STEPS), MASKED, _record([])] * 15 + [
        r.model_dump(exclude_none=True) for r in synthetic(20, 3)
    ]


def test_frames_keep_their_columns_and_slices_and_sums_carry_them():
    records = _many_records()
    rollouts = Rollouts(records)
    pure = rollouts.steps_frame(full=True)
    assert rollouts.store.columns.num_rows == len(records)
    assert rollouts.steps_frame(full=True).equals(pure)  # from the kept columns
    assert pure["episode"].iloc[-1] == len(records) - 1

    # Slices and sums carry the columns they were read with; their frames are those read afresh.
    part = rollouts[10:30]
    assert part.store.columns is not None and part.store.columns.num_rows == 20
    assert part.steps_frame(full=True).equals(Rollouts(records[10:30]).steps_frame(full=True))
    both = part + rollouts[:5]
    assert both.store.columns is not None
    assert both.steps_frame(full=True).equals(Rollouts(records[10:30] + records[:5]).steps_frame(full=True))


def test_an_empty_slice_of_a_run_whose_columns_were_read_is_an_empty_run():
    rollouts = Rollouts(_many_records())
    rollouts.steps_frame()  # the Arrow columns are read and kept
    empty = rollouts[len(rollouts) :]
    assert len(empty) == 0 and empty.store.columns.num_rows == 0
    assert len(empty.steps_frame()) == 0 and len(empty.episodes) == 0


def test_a_bad_line_among_many_is_reported_with_its_number(tmp_path):
    path = tmp_path / "r.jsonl"
    lines = [json.dumps(r) for r in _many_records()]
    lines[41] = '{"responses_create_params": {"input": "q"}, "steps": []}'  # not a rollout record
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DatasetError, match=r"r\.jsonl:42: not a rollout record"):
        Rollouts.load(path).steps_frame(full=True)


def test_a_frame_can_be_edited():
    rollouts = Rollouts(synthetic(4, 3))
    for _ in range(2):  # read, then from the kept columns
        frame = rollouts.steps_frame(full=True)
        frame.loc[0, "reward"] = 5.0
        frame.iloc[1, frame.columns.get_loc("step")] = 7
        frame["tool_errors"] += 1
        assert (frame.loc[0, "reward"], frame.loc[1, "step"], frame["tool_errors"].min()) == (5.0, 7, 1)
    assert rollouts.steps_frame(full=True).loc[0, "reward"] != 5.0  # the kept columns did not change


def test_a_run_finished_in_any_order_gives_the_frame_of_its_records_in_order():
    records = _many_records()
    order = list(range(len(records)))
    straggler = order.pop(7)  # finishes last: every record after it waits as a line of its own
    order = order[::-1][: len(order) // 2][::-1] + order[: len(order) - len(order) // 2][::-1]
    builder = StoreBuilder(len(records))
    for position in order:
        builder.add(position, records[position])
    assert builder.ready == 7 and len(builder.ahead_of) == len(records) - 8
    builder.add(straggler, records[straggler])
    store = builder.finish()
    assert store.buffer == RecordStore.from_records(records).buffer  # in position order
    assert Rollouts(store=store).steps_frame(full=True).equals(Rollouts(records).steps_frame(full=True))
    assert store.columns.num_rows == len(records)  # the columns read are kept with the records
    unfinished = StoreBuilder(3)
    unfinished.add(0, records[0])
    with pytest.raises(ValueError, match="2 record"):
        unfinished.finish()


def test_a_run_whose_records_do_not_fit_the_schema_is_read_again_to_fit():
    plain = _record([{"index": 0, "action": [{"type": "message", "role": "assistant", "content": "plain"}]}])
    records = [_record(ODD_STEPS), plain, _record([])]
    builder = StoreBuilder(len(records))
    for position, record in enumerate(records):
        builder.add(position, record)
    rollouts = Rollouts(store=builder.finish())
    frame = rollouts.steps_frame(full=True)
    assert frame["text"].tolist()[4] == "plain" and frame["episode"].tolist() == [0, 0, 0, 0, 1]
    assert frame.equals(Rollouts(records).steps_frame(full=True))
    assert rollouts.store.columns.num_rows == 3


def test_run_many_frame_is_the_one_read_from_its_lines():
    calculator = load_environment("calculator")
    with Lab() as lab:
        agent = lab.serve_agent(
            "simple_agent", resources=lab.serve(calculator.CalculatorServer), model=lab.serve_model(calculator.policy)
        )
        run = lab.run_many(agent, example_rows("calculator"), repeats=3, concurrency=4)
    assert run.steps_frame(full=True).equals(Rollouts(run.store.lines()).steps_frame(full=True))
    assert [r.reward for r in run] == [r["reward"] for r in run.store.dicts()]


def test_sums_of_runs_keep_the_columns_read_of_both():
    records = _many_records()
    first, second = Rollouts(records[:30]), Rollouts(records[30:])
    first.steps_frame(full=True)
    second.steps_frame(full=True)  # both have their columns kept now
    both = first + second
    assert both.store.columns is not None and both.store.columns.num_rows == len(records)
    assert both.steps_frame(full=True).equals(Rollouts(records).steps_frame(full=True))
    partly = Rollouts(records[:5]) + both  # nothing read of the first: read afresh at the frame
    assert partly.store.columns is None
    assert partly.steps_frame(full=True).equals(Rollouts(records[:5] + records).steps_frame(full=True))


def test_a_small_run_does_not_load_pyarrow():
    import os
    import subprocess
    from pathlib import Path

    root = str(Path(__file__).resolve().parents[2])
    code = (
        "import sys; from gymlab.lab.store import StoreBuilder; from benchmarks.records import synthetic; "
        "b = StoreBuilder(3); [b.add(i, r) for i, r in enumerate(synthetic(3, 2))]; b.finish(); "
        "print('pyarrow' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": root}
    assert subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout == (
        "False\n"
    )


def test_the_episodes_frame_reads_each_line_where_it_lies_not_a_copy_of_every_line():
    """Parsing the records for the episodes frame holds one record at a time: no list of every line
    beside the store's buffer (a copy of every line, which glibc kept after; docs/memory.md)."""
    import tracemalloc

    store = RecordStore.from_records([r.model_dump(mode="json") for r in synthetic(2000, 10)])
    size = len(store.buffer)
    assert size > 10_000_000  # large enough for a copy of the lines to show above the frame's columns
    episodes_frame(store.take(range(2)))  # the modules it imports are not the records
    tracemalloc.start()
    try:
        frame = episodes_frame(store, full=True)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(frame) == 2000 and frame["n_steps"].eq(10).all()
    assert peak < size / 4, f"parsing {size / 1e6:.1f} MB of lines peaked at {peak / 1e6:.1f} MB of Python objects"


def test_the_records_are_read_into_the_system_allocators_pool():
    """The Arrow columns read (and kept with the store) come from the system allocator, which gives
    freed pages back when trimmed; pyarrow's default pool keeps them (docs/memory.md)."""
    import pyarrow as pa

    store = RecordStore.from_records([r.model_dump(mode="json") for r in synthetic(500, 10)])
    system = pa.system_memory_pool()
    before = system.bytes_allocated()
    frame = steps_frame(store, full=True)
    assert len(frame) == 5000
    assert store.columns is not None and store.columns.nbytes > 100_000
    assert system.bytes_allocated() - before >= store.columns.nbytes // 2
