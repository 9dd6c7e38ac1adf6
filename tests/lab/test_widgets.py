"""Widgets, headless: traits and ``.click()`` on the viewer, the stepper (live episodes) and the live panel."""

import json

import pytest

from gymlab.lab.viewer import sparkline_svg
from gymlab.lab.widgets import EpisodeViewer, LivePanel, Stepper


@pytest.fixture
def counter_run(lab, counter, rows):
    env = lab.serve(counter.CounterServer)
    model = lab.serve_model(counter.policy)
    agent = lab.serve_agent("simple_agent", resources=env, model=model)
    return env, model, agent, lab.run_many(agent, rows("counter")[:1])  # 0 -> 3: three increments, then text


def test_viewer_steps_through_a_rollout(counter_run):
    record = counter_run[3][0]
    assert len(record.steps) == 4
    viewer = EpisodeViewer(
        record,
    )
    assert viewer.step == 3 and viewer.slider.max == 3 and viewer.next.disabled  # steps 0-3, as in the frames
    assert list(counter_run[3].steps["step"]) == [0, 1, 2, 3]
    viewer.load(record, step=0)
    assert "step 0 of 0–3" in viewer.status.value and "reward 0" in viewer.status.value
    assert viewer.prev.disabled and not viewer.next.disabled
    html = viewer.conversation.value
    assert "The counter starts at 0" in html and html.count("gl-b gl-call") == 1 and "{&quot;count&quot;:1}" in html
    assert "The counter reads 3" not in html
    viewer.next.click()
    viewer.next.click()
    viewer.next.click()
    assert viewer.step == 3 and "step 3 of 0–3" in viewer.status.value and "reward 1" in viewer.status.value
    assert "The counter reads 3" in viewer.conversation.value
    assert viewer.conversation.value.count("gl-b gl-call") == 3
    viewer.prev.click()
    assert viewer.step == 2
    viewer.slider.value = 1
    assert "step 1 of 0–3" in viewer.status.value
    assert viewer.sparkline.value.count("<circle") == 1


def test_viewer_never_sends_the_browser_a_slider_value_outside_its_range(counter_run):
    """The browser's slider handles an update's keys in order and clamps a value outside the range it
    has so far, sending the clamped value back: the viewer then fell back a step (seen in JupyterLab
    under load). Replay what the viewer sends on a model of that slider while episodes grow and shrink."""
    record = counter_run[3][0]
    viewer = EpisodeViewer()
    sent = []

    class Comm:  # what the slider sends to the front end
        kernel, comm_id = "a kernel", "a comm"

        def on_msg(self, callback):
            pass

        def send(self, data, buffers=None):
            sent.append(data["state"])

    viewer.slider.comm = Comm()
    browser = {"min": viewer.slider.min, "max": viewer.slider.max, "value": viewer.slider.value}
    for k in (1, 2, 3, 4, 2, 0, 4):
        viewer.load(record.model_copy(update={"steps": record.steps[:k]}))
        for state in sent:
            model = {**browser, **state}  # the model takes every key, then each change event runs in order
            for key in state:
                if key in ("min", "max"):
                    browser[key] = state[key]
                if key in ("min", "max", "value"):
                    assert browser["min"] <= model["value"] <= browser["max"], (k, state, browser)
            browser.update(model)
        sent.clear()
        assert (
            browser["value"] == viewer.step
            and f"step {viewer.step} of 0–{len(viewer.steps) - 1}" in viewer.status.value
        )
    viewer.slider.comm = None


def test_sparkline_marks_the_current_step():
    svg = sparkline_svg([0.0, 0.5, 1.0], current=2)
    assert svg.startswith("<svg") and "points='4.0,28.0 80.0,16.0 156.0,4.0'" in svg
    assert "cx='156.0' cy='4.0'" in svg
    assert "<polyline" not in sparkline_svg([])


def test_stepper_drives_a_live_episode(lab, counter, rows, counter_run):
    env, model, _, _ = counter_run
    ep = lab.episode(env, rows("counter")[0], model=model)
    stepper = Stepper(ep)
    assert stepper.message.value == "seeded" and stepper.tool.value == "increment"
    assert json.loads(stepper.arguments.value) == {"by": 0}
    stepper.arguments.value = '{"by": 2}'
    stepper.step_button.click()
    assert stepper.message.value == "called increment" and len(ep.steps) == 1
    assert (
        "step 0 of 0–0" in stepper.viewer.status.value and "{&quot;count&quot;:2}" in stepper.viewer.conversation.value
    )
    stepper.model_button.click()  # the policy increments by one
    assert len(ep.steps) == 2 and "{&quot;count&quot;:3}" in stepper.viewer.conversation.value
    stepper.arguments.value = "{by: 1}"
    stepper.step_button.click()
    assert "arguments are not JSON" in stepper.message.value and len(ep.steps) == 2
    stepper.tool.value = ""
    assert stepper.arguments.disabled and not stepper.text.disabled
    stepper.text.value = "The counter reads 3."
    stepper.step_button.click()
    stepper.verify_button.click()
    assert stepper.message.value == "verified: reward 1"
    assert "reward 1" in stepper.viewer.status.value and "step 2 of 0–2" in stepper.viewer.status.value
    assert stepper.step_button.disabled and stepper.verify_button.disabled
    stepper.reset_button.click()
    assert stepper.episode is not ep and stepper.message.value == "a new episode"
    assert "no steps yet" in stepper.viewer.status.value and not stepper.step_button.disabled
    stepper.episode.close()
    assert env.server.session_state == {}  # every session released


def test_stepper_shows_server_errors_instead_of_raising(lab, counter, rows, counter_run):
    env, _, _, _ = counter_run
    stepper = Stepper(lab.episode(env, rows("counter")[0]))  # no model
    assert stepper.model_button.disabled
    stepper.arguments.value = '{"by": "two"}'
    stepper.step_button.click()
    assert "gl-err" in stepper.message.value and "HTTP 422" in stepper.message.value
    assert not stepper.episode.steps
    stepper.episode.close()


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_live_panel_throttles_and_counts(counter_run):
    record = counter_run[3][0]
    masked = record.model_copy(
        update={"mask_sample": True, "failure_kind": "timeout", "failure_stage": "verification", "reward": 0.0}
    )
    clock = FakeClock()
    panel = LivePanel(total=1000, clock=clock)
    first = panel.renders
    for n in range(1000):
        clock.now = n * 0.001  # one episode a millisecond
        panel.add(masked if n % 10 == 0 else record)
    assert panel.renders - first == 9  # one redraw per 0.1 s of the clock (0.1, 0.2, ... 0.9 s)
    assert panel.progress.value < 1000
    panel.add_failure("simple_agent:run_failed")
    panel.finish()
    assert panel.progress.value == 1001 and panel.done == 1001
    assert panel.mean_reward == 1.0 and panel.kept == 900
    assert dict(panel.failed) == {"timeout": 100, "simple_agent:run_failed": 1}
    assert "mean reward 1.000" in panel.summary.value and "over 900 unmasked of 1001" in panel.summary.value
    assert "(101 masked or failed, left out of the mean)" in panel.summary.value
    assert "timeout</td><td>verification</td><td>100" in panel.failures.value
    assert panel.progress.bar_style == "warning"  # some failed: amber (red only when all did)


def test_live_panel_runs_a_collection(counter_run, rows):
    _, _, agent, _ = counter_run
    panel = LivePanel()
    rollouts = panel.run(agent, rows("counter"), repeats=2)
    assert len(rollouts) == panel.done == panel.total == 2 * len(rows("counter"))
    assert panel.mean_reward == rollouts.mean_reward == 1.0
    assert panel.progress.value == len(rollouts) and panel.progress.bar_style == "success"
    assert [r._ng_rollout_index for r in rollouts[:2]] == [0, 1]


def test_stepper_drives_a_gymnasium_episode(lab, rows):
    from gymlab.examples import load_environment

    gym = load_environment("calculator_gym")
    env = lab.serve(gym.CalculatorEnv)
    model = lab.serve_model(gym.policy)
    stepper = Stepper(lab.episode(env, rows("calculator_gym")[0], model=model))
    assert stepper.message.value == "reset" and stepper.verify_button.disabled
    stepper.arguments.value = '{"value": 4}'
    stepper.step_button.click()
    assert (
        "step 0 of 0–0" in stepper.viewer.status.value
        and "{&quot;result&quot;: 16}" in stepper.viewer.conversation.value
    )
    stepper.model_button.click()  # the policy reads 16 and answers: reward 1, terminated
    assert "the episode terminated" in stepper.message.value
    assert "step 1 of 0–1" in stepper.viewer.status.value and "reward 1" in stepper.viewer.status.value
    assert stepper.step_button.disabled and stepper.model_button.disabled
    first = stepper.episode
    stepper.reset_button.click()
    assert stepper.episode is not first and stepper.message.value == "a new episode"
    assert not stepper.step_button.disabled and "no steps yet" in stepper.viewer.status.value
    stepper.episode.close()
