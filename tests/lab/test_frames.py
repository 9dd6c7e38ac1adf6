"""Frames and Rollouts on really collected rollouts: columns, dtypes, rewards, JSONL round trip."""

import json

import pytest

from benchmarks.records import synthetic as synthetic_rollouts
from gymlab import DatasetError, Lab
from gymlab.examples import example_rows, load_environment
from gymlab.lab.columnar import STEP_COLUMNS
from gymlab.lab.frames import CALL_COLUMNS, EPISODE_COLUMNS
from gymlab.lab.runs import Rollouts

#: The concise episode columns of a run in which nothing failed (before its row fields).
EPISODE_CONCISE_CLEAN = ["episode", "task", "repeat", "reward", "prompt", "answer", "n_steps", "terminated"]
EPISODE_CONCISE_CLEAN += ["truncated", "mask_sample"]
EPISODE_CONCISE_CLEAN += ["total_tokens", "environment", "agent"]


@pytest.fixture(scope="module")
def runs():
    """Counter (seed/verify, tool calls) and blackjack (gymnasium, per-step rewards), two repeats each,
    plus a run whose model fails on one task (recorded masked, not dropped)."""
    counter, blackjack = load_environment("counter"), load_environment("blackjack")
    with Lab() as lab:
        counter_env = lab.serve(counter.CounterServer)
        counter_agent = lab.serve_agent(
            "simple_agent",
            name="counter_agent",
            resources=counter_env,
            model=lab.serve_model(counter.policy, name="counter_policy"),
        )
        bj_env = lab.serve(blackjack.BlackjackEnv)
        bj_agent = lab.serve_agent(
            "gymnasium_agent",
            name="blackjack_agent",
            resources=bj_env,
            model=lab.serve_model(blackjack.policy, name="blackjack_policy"),
        )

        def sometimes_broken(request):
            if "reads 6" in request.input_items()[0].text:
                raise RuntimeError("model is down")
            return counter.policy(request)

        broken_agent = lab.serve_agent(
            "simple_agent",
            name="broken_agent",
            resources=counter_env,
            model=lab.serve_model(sometimes_broken, name="broken_policy"),
        )
        collected = {
            "counter": lab.run_many(counter_agent, example_rows("counter"), repeats=2, concurrency=4),
            "blackjack": lab.run_many(bj_agent, example_rows("blackjack"), repeats=2, concurrency=4),
        }
        assert counter_env.server.session_state == {}
        assert bj_env.server.session_state == {}
        collected["broken"] = lab.run_many(broken_agent, example_rows("counter")[:2])
        yield collected


def test_run_many_orders_repeats_aabbcc_and_names_agent_and_env(runs):
    rollouts = runs["counter"]
    n = len(example_rows("counter"))
    assert [(r._ng_task_index, r._ng_rollout_index) for r in rollouts] == [(t, k) for t in range(n) for k in (0, 1)]
    assert {r.agent for r in rollouts} == {"counter_agent"}
    assert {r.env for r in rollouts} == {"counter_server"}


def test_episodes_frame(runs):
    frame = (runs["counter"] + runs["blackjack"]).episodes_frame(full=True)
    row_fields = ["initial_count", "target", "final_count", "seed"]  # the rows' own (and verify's echo)
    assert list(frame.columns) == EPISODE_COLUMNS + row_fields
    dtypes = frame.dtypes.astype(str).to_dict()
    assert dtypes["episode"] == "int64" and dtypes["n_steps"] == "int64"
    assert dtypes["task"] == "Int64" and dtypes["repeat"] == "Int64" and dtypes["total_tokens"] == "Int64"
    assert dtypes["reward"] == "float64" and dtypes["mask_sample"] == "bool"
    for name in ("model", "environment", "agent", "failure_kind"):
        assert dtypes[name] == "category", name
    assert set(frame["environment"].cat.categories) == {"counter_server", "blackjack_env"}
    assert (frame["total_tokens"] > 0).all()
    assert (frame.loc[frame["environment"] == "counter_server", "reward"] == 1.0).all()
    assert frame["terminated"].all()


def test_episodes_frame_is_concise_and_reads_like_the_conversation(runs):
    rollouts = runs["counter"]
    frame = rollouts.episodes
    # no column that is empty for every episode of this run; the fields that tell tasks apart after the ids
    ids, rest = EPISODE_CONCISE_CLEAN[:3], EPISODE_CONCISE_CLEAN[3:]
    assert list(frame.columns) == [*ids, "initial_count", "target", "final_count", *rest, "completed"]
    assert frame["target"].tolist() == [r.target for r in rollouts]
    assert frame["prompt"].tolist() == [r.responses_create_params.input_items()[-1].text for r in rollouts]
    assert frame["answer"].tolist() == [r.response.output_text for r in rollouts]
    assert frame["answer"].str.len().gt(0).all()
    broken = runs["broken"].episodes
    assert {"failure_kind", "failure_reason"} <= set(broken.columns)  # shown when an episode failed
    blackjack = runs["blackjack"].episodes
    assert blackjack["seed"].tolist() == [r.seed for r in runs["blackjack"]]  # the row's own field


def test_steps_frame_has_the_assistants_text(runs):
    steps = runs["counter"].steps
    assert "observation" not in steps  # no counter step has one
    finals = steps[steps["action_type"] == "message"]
    assert len(finals) == len(runs["counter"]) and finals["text"].str.len().gt(0).all()
    assert steps.loc[steps["action_type"] == "function_call", "text"].isna().all()
    assert "observation" in runs["blackjack"].steps


def test_steps_frame_rewards_sum_to_the_episode_reward(runs):
    rollouts = runs["counter"] + runs["blackjack"]
    steps, episodes = rollouts.steps_frame(full=True), rollouts.episodes
    assert list(steps.columns) == STEP_COLUMNS
    assert str(steps["action_type"].dtype) == "category" and str(steps["tool"].dtype) == "category"
    assert str(steps["reward"].dtype) == "float64" and str(steps["step"].dtype) == "int64"
    assert len(steps) == sum(len(r.steps) for r in rollouts) == episodes["n_steps"].sum()
    per_episode = steps.groupby("episode")["reward"].sum()
    assert per_episode.to_dict() == pytest.approx(episodes.set_index("episode")["reward"].to_dict())
    last = steps.groupby("episode").tail(1).set_index("episode")["cumulative_reward"]
    assert last.to_dict() == pytest.approx(episodes.set_index("episode")["reward"].to_dict())
    assert set(steps["tool"].dropna()) == {"increment", "hit", "stand"}
    # a counter step: the call's arguments and the tool's output
    first = steps.iloc[0]
    assert first["action_type"] == "function_call" and first["tool"] == "increment"
    assert json.loads(first["arguments"]) == {"by": 1} and json.loads(first["output"]) == {"count": 1}
    # blackjack steps carry observations; only a hand's last step is terminated
    bj = steps[steps["episode"].isin(episodes.index[episodes["environment"] == "blackjack_env"])]
    assert bj["observation"].notna().all()
    assert (bj.groupby("episode")["terminated"].sum() == 1).all()


def test_calls_frame(runs):
    rollouts = runs["counter"]
    calls = rollouts.calls
    assert list(calls.columns) == CALL_COLUMNS
    assert str(calls["tool"].dtype) == "category"
    assert len(calls) == sum(1 for r in rollouts for s in r.steps for i in s.action if i.type == "function_call")
    assert calls["output"].notna().all()
    assert (calls["tool"] == "increment").all()


def test_failed_episodes_are_recorded_masked(runs):
    frame = runs["broken"].episodes
    assert frame["mask_sample"].tolist() == [False, True]
    assert frame["failure_kind"].tolist()[1] == "provider_unavailable"
    assert "model is down" in frame["failure_reason"].iloc[1]
    assert runs["broken"].mean_reward == 1.0


def test_save_load_round_trip(runs, tmp_path):
    rollouts = runs["counter"] + runs["broken"]
    path = rollouts.save(tmp_path / "run.jsonl")
    assert list(tmp_path.iterdir()) == [path]  # the temp file was renamed, none left behind
    loaded = Rollouts.load(path)
    assert len(loaded) == len(rollouts)
    assert (
        loaded.episodes_frame(full=True)
        .drop(columns="duration_s")
        .equals(rollouts.episodes_frame(full=True).drop(columns="duration_s"))
    )
    assert loaded.steps_frame(full=True).equals(rollouts.steps_frame(full=True))
    assert loaded == rollouts and list(loaded) == list(rollouts)


def test_load_errors_name_file_and_line(tmp_path):
    good = synthetic_rollouts(1, 1)[0].model_dump_json()
    path = tmp_path / "bad.jsonl"
    path.write_text(good + "\n{not json\n")
    loaded = Rollouts.load(path)  # lazy: the bad line is found when used
    assert loaded[0].reward == 1.0
    with pytest.raises(DatasetError, match=r"bad.jsonl:2: not valid JSON"):
        _ = loaded[1]
    with pytest.raises(DatasetError, match=r"bad.jsonl:2: not valid JSON"):
        loaded.episodes_frame()
    path.write_text(good + "\n\n" + json.dumps({"reward": 1.0}) + "\n")
    with pytest.raises(DatasetError, match=r"bad.jsonl:3: not a rollout record: responses_create_params"):
        list(Rollouts.load(path))
    with pytest.raises(DatasetError, match=r"bad.jsonl:3: not a rollout record"):
        Rollouts.load(path).steps_frame()
    path.write_text(good + "\n" + good[:40])
    with pytest.raises(DatasetError, match=r"bad.jsonl:2: torn last line"):
        Rollouts.load(path)  # a torn last line is reported at once


def test_the_row_field_that_tells_tasks_apart_comes_right_after_task_and_repeat():
    from benchmarks.records import synthetic

    records = [
        r.model_copy(update={"target": 3 + r.task_index, "level": "easy", "notes": {"n": i}})
        for i, r in enumerate(synthetic(4, 2))
    ]
    frame = Rollouts(records).episodes
    columns = list(frame.columns)
    assert columns[:5] == ["episode", "task", "repeat", "target", "notes"], columns  # they differ task to task
    assert columns[-1] == "level" and columns.index("reward") > columns.index("target")  # the same for all: last
    assert list(frame["target"]) == [3 + r.task_index for r in records]


def test_an_integer_past_64_bits_reaches_the_frame_exactly(tmp_path):
    """A row field such as a big answer is read as the standard library reads it (orjson alone makes it a float),
    in a gymlab record and in one written without steps (NeMo Gym's), whose steps are derived on load."""
    record = json.loads(synthetic_rollouts(1, 1)[0].model_dump_json())
    bare = {k: v for k, v in record.items() if k != "steps"}
    path = tmp_path / "big.jsonl"
    path.write_text("".join(json.dumps({**r, "answer_id": 2**70 + 1}) + "\n" for r in (record, bare)))
    loaded = Rollouts.load(path)
    assert list(loaded.episodes_frame()["answer_id"]) == [2**70 + 1, 2**70 + 1]
    assert [r.model_extra["answer_id"] for r in loaded] == [2**70 + 1, 2**70 + 1]
    assert len(loaded.steps_frame()) == 2 * len(record["steps"])  # the bare record's steps were derived


def test_a_deeply_nested_line_is_a_clear_error_in_a_frame(tmp_path):
    good = synthetic_rollouts(1, 1)[0].model_dump_json()
    path = tmp_path / "deep.jsonl"
    path.write_text(good + "\n" + '{"response": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    with pytest.raises(DatasetError, match=r"deep.jsonl:2: not valid JSON"):
        Rollouts.load(path).episodes_frame()
