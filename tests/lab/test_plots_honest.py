"""What each plot draws, checked against the run it draws (the data, not pixels): every episode or a
stated sample across tasks, a window of one repeat, Wilson intervals for 0/1 rewards inside the reward
range, a neutral grey for the zero-reward steps on the way, whole-number count axes."""

import matplotlib

matplotlib.use("Agg")

import json  # noqa: E402
import re  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.container import BarContainer  # noqa: E402

from gymlab import Lab, function_call  # noqa: E402
from gymlab.examples import example_rows, load_environment  # noqa: E402
from gymlab.lab import plots  # noqa: E402

REPEATS = 4
LAST, ON_THE_WAY = "mean reward at the episode's last step", "mean reward at a step on the way"


def stops_short(request):
    """The counter's policy, except that it answers one increment early when the climb is 3 or more:
    some tasks always succeed, others always fail, and every episode takes several steps."""
    items = request.input_items()
    text = " ".join(i.text for i in items if i.type == "message" and i.role == "user")
    start, target = (int(n) for n in re.findall(r"-?\d+", text)[:2])
    outputs = [i for i in items if i.type == "function_call_output"]
    count = json.loads(outputs[-1].output)["count"] if outputs else start
    goal = target - 1 if target - start >= 3 else target
    return [function_call("increment", {"by": 1})] if count < goal else f"The counter reads {count}."


@pytest.fixture(scope="module")
def run():
    counter = load_environment("counter")
    with Lab() as lab:
        env = lab.serve(counter.CounterServer)
        agent = lab.serve_agent("simple_agent", resources=env, model=lab.serve_model(stops_short))
        yield lab.run_many(agent, example_rows("counter"), repeats=REPEATS)


def _line(ax, label):
    (line,) = [line for line in ax.get_lines() if line.get_label() == label]
    return line


def _band(ax):
    (band,) = ax.collections[:1]
    return np.concatenate([p.vertices[:, 1] for p in band.get_paths()])


def test_the_run_has_varied_tasks(run):
    by_task = run.episodes.groupby("task")["reward"].mean()
    assert set(by_task) == {0.0, 1.0} and run.steps.groupby("episode").size().min() >= 2


def test_step_rewards_draw_every_episode(run):
    steps, episodes = run.steps, run.episodes
    ax = plots.step_rewards(steps, episodes=episodes).axes[0]
    last = steps["step"] == steps.groupby("episode")["step"].transform("max")
    expected = steps[last].groupby("step")["reward"].mean()  # over all 20 episodes, not the first few
    assert list(_line(ax, LAST).get_ydata()) == pytest.approx(list(expected))
    assert list(_line(ax, ON_THE_WAY).get_ydata()) == pytest.approx(list(steps[~last].groupby("step")["reward"].mean()))
    assert ax.get_title() == f"Mean reward by step over {len(episodes)} episodes (bands: 95% Wilson interval)"


def test_a_step_rewards_sample_takes_every_task_and_says_so(run):
    steps, episodes = run.steps, run.episodes
    n_tasks = episodes["task"].nunique()
    ax = plots.step_rewards(steps, episodes=episodes, max_episodes=n_tasks).axes[0]
    sample = episodes[episodes["repeat"] == 0]["episode"]  # one repeat: every task once
    drawn = steps[steps["episode"].isin(sample)]
    last = drawn["step"] == drawn.groupby("episode")["step"].transform("max")
    expected = drawn[last].groupby("step")["reward"].mean()
    assert list(_line(ax, LAST).get_ydata()) == pytest.approx(list(expected))
    assert (
        f"over a sample of {n_tasks} of {len(episodes)} episodes (every task once per repeat, {n_tasks} tasks)"
        in ax.get_title()
    )
    # the sample's final-step mean is the run's: the first N episodes (one task's block) would not be
    last = steps.groupby("episode")["reward"].last()
    assert last[sample].mean() == pytest.approx(run.mean_reward)


def test_the_rolling_mean_is_over_one_repeat_so_deterministic_tasks_draw_a_flat_line(run):
    ax = plots.reward_curve(run.episodes).axes[0]
    n_tasks = run.episodes["task"].nunique()
    mean = _line(ax, f"rolling mean ({n_tasks})").get_ydata()
    assert list(mean[n_tasks - 1 :]) == pytest.approx([run.mean_reward] * (len(mean) - n_tasks + 1))  # no sawtooth
    low, high = _band(ax).min(), _band(ax).max()
    assert 0.0 <= low and high <= 1.0


def test_wilson_intervals_for_0_1_rewards_clipped_to_the_range():
    z = plots.Z
    low, high = plots.interval([1.0], [0.0], [3], binary=True, low=0.0, high=1.0)
    assert low[0] == pytest.approx(3 / (3 + z * z)) and high[0] == 1.0  # three successes: not "certainly 1"
    low, high = plots.interval([0.0], [0.0], [3], binary=True, low=0.0, high=1.0)
    assert low[0] == 0.0 and high[0] == pytest.approx(z * z / (3 + z * z))  # three failures: not "certainly 0"
    low, high = plots.interval([0.9], [0.5], [2], binary=False, low=-1.0, high=1.0)
    assert high[0] == 1.0 and low[0] == pytest.approx(0.9 - z * 0.5 / np.sqrt(2))  # clipped to the top reward
    low, high = plots.interval([0.5], [np.nan], [1], binary=False, low=-1.0, high=1.0)
    assert (low[0], high[0]) == (-1.0, 1.0)  # one value says nothing: the whole range


def test_every_band_and_bar_stays_inside_the_reward_range(run):
    episodes, steps = run.episodes, run.steps
    step_band = _band(plots.step_rewards(steps, episodes=episodes).axes[0])
    assert step_band.min() >= 0.0 and step_band.max() <= 1.0
    ax = plots.compare_runs({"run": episodes}, by="task").axes[0]
    (bars,) = [c for c in ax.containers if isinstance(c, BarContainer)]
    (errors,) = bars.errorbar.lines[2]
    tops = np.concatenate([seg[:, 1] for seg in errors.get_segments()])
    assert tops.min() >= 0.0 and tops.max() <= 1.0
    for task, (bar, seg) in enumerate(zip(bars, errors.get_segments())):
        rewards = episodes.loc[episodes["task"] == task, "reward"]
        assert bar.get_height() == pytest.approx(rewards.mean())
        low, high = plots.interval([rewards.mean()], [0.0], [len(rewards)], binary=True, low=0.0, high=1.0)
        assert sorted(seg[:, 1]) == pytest.approx([low[0], high[0]])  # Wilson, around a task always 0 or 1


def test_the_heatmap_draws_the_steps_on_the_way_grey_and_the_outcome_in_colour(run):
    steps, episodes = run.steps, run.episodes
    colour, grey = plots.reward_heatmap(steps, episodes=episodes).axes[0].get_images()
    colours = np.ma.filled(colour.get_array().astype("float64"), np.nan)
    greys = np.ma.filled(grey.get_array().astype("float64"), np.nan)
    for row, grey_row, (_, own) in zip(colours, greys, steps.groupby("episode")):
        rewards = own["reward"].tolist()
        last = len(rewards) - 1
        assert rewards[:last] == [0.0] * last  # tool calls pay nothing...
        assert list(grey_row[:last]) == [1.0] * last and np.isnan(row[:last]).all()  # ...and are drawn grey
        assert row[last] == rewards[last] and np.isnan(grey_row[last])  # the outcome, 1 or 0, in colour
    assert np.isnan(colours[:, :]).sum() > 0 and (colours == 0.0).sum() == (episodes["reward"] == 0.0).sum()


def test_the_profile_counts_tasks_in_whole_numbers(run):
    ax = run.profile().plot()
    ticks = ax.get_yticks()
    assert len(ticks) and all(float(t).is_integer() for t in ticks)
