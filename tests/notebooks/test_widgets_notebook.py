"""Notebook 06 (widgets) executed in a real kernel; the widgets' state checked by a probe."""

from tests.notebooks.kernel import run_notebook


def test_06_widgets():
    out, _ = run_notebook(
        "06_widgets.ipynb",
        """{
            "episodes": len(rollouts),
            "failures": rollouts.failures,
            "mean_reward": rollouts.mean_reward,
            "panel_done": panel.done,
            "panel_failed": dict(panel.failed),
            "panel_mean_reward": panel.mean_reward,
            "panel_summary": panel.summary.value,
            "viewer_step": viewer.step,
            "viewer_steps": len(viewer.steps),
            "browser_shown": len(browser.shown),
            "browser_index": browser.index,
            "browser_in_step": [browser.step, browser.slider.max, len(browser.steps)],
            "browser_failures": [v for _, v in browser.failure_filter.options],
            "stepper_steps": len(stepper.episode.steps),
            "stepper_message": stepper.message.value,
            "stepper_in_step": [stepper.viewer.step, stepper.viewer.slider.max],
        }""",
    )
    assert out["episodes"] == out["panel_done"] == 4 * 5
    assert out["failures"] == out["panel_failed"] == {"provider_unavailable": 4}  # one task's model fails
    assert out["panel_mean_reward"] == out["mean_reward"] == 12 / 16  # another task earns 0
    assert "over 16 unmasked of 20" in out["panel_summary"]
    assert out["viewer_step"] == 1 and out["viewer_steps"] == 4  # step 0, then next once
    assert out["browser_shown"] == 20 and out["browser_index"] == 0 and out["browser_in_step"] == [3, 3, 4]
    assert out["browser_failures"] == ["*", "", "provider_unavailable"]
    assert out["stepper_steps"] == 2 and out["stepper_message"] == "the model took a step"
    assert out["stepper_in_step"] == [1, 1]  # steps counted from 0, as in the frames
