"""The run browser, headless: filter a real run by reward, task and failure kind, then browse it."""

import pytest

from gymlab.lab.viewer import ANY, EpisodeViewer, RunFilter
from gymlab.lab.widgets import LivePanel


@pytest.fixture
def flaky_agent(lab, counter):
    """simple_agent over the counter: task 1's model raises (masked), task 2's gives up (reward 0), the rest earn 1."""

    def flaky(request):
        text = request.input_items()[0].text
        if "starts at 5." in text:
            raise RuntimeError("the policy broke on purpose")
        if "starts at 2." in text:
            return "I give up."
        return counter.policy(request)

    env = lab.serve(counter.CounterServer)
    return lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(flaky))


@pytest.fixture
def mixed_run(lab, flaky_agent, rows):
    return lab.run_many(flaky_agent, rows("counter"), repeats=2)


def test_run_filter_offers_what_the_run_holds(mixed_run):
    run = RunFilter(mixed_run)
    failures = mixed_run.failures
    assert len(failures) == 1 and sum(failures.values()) == 2  # task 1, twice
    (kind,) = failures
    assert run.failure_options() == [("any outcome", ANY), ("no failure (8)", ""), (f"{kind} (2)", kind)]
    assert run.reward_options() == [("any reward", ANY), ("reward 0 (4)", ("=", 0.0)), ("reward 1 (6)", ("=", 1.0))]
    tasks = run.task_options()
    assert [v for _, v in tasks] == [ANY, 0, 1, 2, 3, 4]
    assert tasks[2][0].startswith("task 1 (2): The counter starts at 5.")
    assert run.match(failure=kind) == [i for i, r in enumerate(mixed_run) if r.task_index == 1]
    assert run.match(reward=("=", 0.0), failure="") == [i for i, r in enumerate(mixed_run) if r.task_index == 2]
    assert run.match(reward=("=", 1.0), task=2) == []


def test_viewer_filters_then_browses_a_run(mixed_run):
    viewer = EpisodeViewer(mixed_run)
    assert viewer.run_bar.layout.display == "" and viewer.index == 0
    assert "10 of 10 episodes match" in viewer.matches.value and "episode 1 of 10 shown" in viewer.matches.value
    assert viewer.prev_episode.disabled and not viewer.next_episode.disabled
    assert f"step {viewer.step} of 0–{len(viewer.steps) - 1}" in viewer.status.value
    assert viewer.step == viewer.slider.max == len(viewer.steps) - 1  # the last step, counted from 0

    kind = next(iter(mixed_run.failures))
    viewer.failure_filter.value = kind  # the dropdown, as a click in the browser sets it
    assert [mixed_run[i].task_index for i in viewer.shown] == [1, 1]
    assert viewer.record == mixed_run[viewer.index] and viewer.record.mask_sample
    assert f"masked: {kind}" in viewer.status.value and "the policy broke on purpose" in viewer.status.value

    viewer.failure_filter.value = ""
    viewer.reward_filter.value = ("=", 0.0)
    assert [mixed_run[i].task_index for i in viewer.shown] == [
        2,
        2,
    ] and "2 of 10 episodes match" in viewer.matches.value
    first = viewer.index
    assert "I give up." in viewer.conversation.value and "episode reward 0" in viewer.status.value
    viewer.next_episode.click()
    assert viewer.index != first and viewer.next_episode.disabled and not viewer.prev_episode.disabled
    assert "episode 2 of 2 shown" in viewer.matches.value

    viewer.filter(reward=1.0)  # from code; the kept episode (reward 0) no longer matches: the first match shows
    assert len(viewer.shown) == 6 and viewer.index == viewer.shown[0] and viewer.record.reward == 1.0
    record = mixed_run[viewer.index]
    assert viewer.step == len(record.steps) - 1 == viewer.slider.max  # the slider follows the episode shown
    viewer.slider.value = 0
    viewer.episode.value = viewer.shown[-1]
    assert viewer.step == viewer.slider.max == len(mixed_run[viewer.shown[-1]].steps) - 1
    assert f"step {viewer.step} of 0–{viewer.step}" in viewer.status.value

    viewer.filter(reward=1.0, task=2)
    assert viewer.shown == [] and viewer.record is None and viewer.index is None
    assert "no episode of this run matches" in viewer.status.value and viewer.slider.value == viewer.slider.max == 0
    assert viewer.prev.disabled and viewer.next.disabled
    with pytest.raises(ValueError, match="task filter 99 is not offered"):
        viewer.filter(task=99)


def test_viewer_still_shows_one_episode(mixed_run):
    record = next(r for r in mixed_run if r.reward == 1.0)
    viewer = EpisodeViewer(record, step=1)
    assert viewer.run_bar.layout.display == "none" and viewer.index is None
    assert viewer.step == 1 and f"step 1 of 0–{len(record.steps) - 1}" in viewer.status.value
    viewer.load(mixed_run)  # the same viewer takes a run afterwards
    assert viewer.run_bar.layout.display == "" and len(viewer.shown) == 10


def test_live_panel_counts_the_records_failure_kinds(flaky_agent, rows):
    panel = LivePanel()
    rollouts = panel.run(flaky_agent, rows("counter"), repeats=2)
    assert dict(panel.failed) == rollouts.failures and sum(panel.failed.values()) == 2
    (kind,) = rollouts.failures
    stage = rollouts[[r.task_index for r in rollouts].index(1)].failure_stage
    assert stage and f"{kind}</td><td>{stage}</td><td>2</td>" in panel.failures.value
    assert panel.mean_reward == rollouts.mean_reward == 6 / 8
    assert "mean reward 0.750</span> <span class='gl-mean-covers'>over 8 unmasked of 10</span>" in panel.summary.value
    assert panel.progress.bar_style == "warning"  # 2 of 10 failed: amber, not red


def test_viewer_takes_any_sequence_of_records(mixed_run):
    """A run is any sequence of records: a list of dicts (a JSONL file read by hand) browses the same."""
    viewer = EpisodeViewer(tuple(r.model_dump(mode="json") for r in mixed_run))
    assert len(viewer.shown) == 10 and viewer.record.reward == mixed_run[0].reward
    viewer.filter(task=3)
    assert [viewer.rollouts[i].task_index for i in viewer.shown] == [3, 3]
