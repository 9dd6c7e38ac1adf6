"""The widgets and tutorials rendered for real: JupyterLab on 127.0.0.1, driven by Playwright in Debian's Chromium.

JupyterLab is started by `make lab` (on a workspace of its own). In its copy of notebooks/06_widgets.ipynb,
every cell run, the tests click the viewer and the stepper, filter the run browser and browse what matches,
and check the step and reward they display and that each slider stands where its status line says; the copy
of 02b runs from scratch without an error; a new notebook's one plot call shows an image (no `%matplotlib`
magic). Screenshots go to tests/browser/screenshots/ (gitignored). No browser is downloaded: Chromium comes
from the system (``make browser-deps``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from gymlab.testing.workers import wait_until
from tests.jupyterlab_status import answers

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium")  # Debian's package (`make browser-deps`), found on PATH
SCREENSHOTS = Path(__file__).resolve().parent / "screenshots"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]
#: every wait in this test, Playwright's expect included (its own default is 5 s): on a loaded CI machine
#: the kernel, JupyterLab and Chromium share two cores, and a widget update can take that long to show
WAIT_MS = 60_000
START_S = 120  # JupyterLab's start-up, polled

playwright_sync = pytest.importorskip("playwright.sync_api", reason="pip install -e '.[browser]'")
if CHROMIUM is None:
    # `make test` installs Chromium first, so under CI a missing browser is a failure, never a skip.
    message = "chromium is not on PATH: run `make browser-deps` (apt-get install chromium)"
    if os.environ.get("CI"):
        raise RuntimeError(message)
    pytest.skip(message, allow_module_level=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def jupyterlab(tmp_path_factory):
    """JupyterLab as `make lab` starts it, on a workspace of its own (the tutorials' copies) and a free port;
    killed afterwards."""
    tmp_path = tmp_path_factory.mktemp("make_lab")
    venv = Path(sys.executable).parent.parent  # the venv these tests run in stands in for .venv
    port = free_port()
    env = {
        **os.environ,
        "JUPYTERLAB_SETTINGS_DIR": str(tmp_path / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"),
        "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt"),
    }
    stamp = venv / ".installed-lab"  # -o: taken as made, so make installs nothing into this venv
    command = ["make", "-s", "-o", str(stamp), "lab", f"VENV={venv}", f"LAB_PORT={port}"]
    proc = subprocess.Popen(
        [*command, f"WORKSPACE={tmp_path / 'workspace'}"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        first = proc.stdout.readline()
        match = re.match(
            rf"JupyterLab: (http://127\.0\.0\.1:{port})/lab/tree/01_quickstart\.ipynb\?token=(\w+)$", first
        )
        assert match, first
        base, token = match.groups()

        def ready() -> bool:
            assert proc.poll() is None, proc.stdout.read()
            return answers(base, token)

        wait_until(ready, START_S, "make lab: JupyterLab answering")
        yield base, token
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def accept_kernel_dialog(page) -> None:
    """Accept JupyterLab's "Select Kernel" dialog (python3 is preselected) if it opens.

    Usually the notebook's python3 kernel starts without one, so wait for whichever comes first, the
    dialog or the kernel idle, rather than for the dialog alone (which cost a fixed 30 s when none
    came, and missed one that came later on a loaded machine).
    """
    accept = page.locator(".jp-Dialog .jp-mod-accept")
    kernel_idle = page.locator(".jp-StatusBar-Item", has_text="| Idle").filter(has_not_text="No Kernel")
    playwright_sync.expect(accept.or_(kernel_idle).first).to_be_visible(timeout=WAIT_MS)
    if accept.count():
        accept.first.click()
        page.wait_for_selector(".jp-Dialog", state="detached", timeout=WAIT_MS)


def wait_idle(page) -> None:
    playwright_sync.expect(page.locator(".jp-StatusBar-Item", has_text="| Idle").first).to_be_visible(timeout=WAIT_MS)


def expect_slider_in_step(viewer) -> int:
    """The viewer's slider (its readout and its handle) stands at the step its status line names; returns it."""
    playwright_sync.expect(viewer.locator(".gl-status")).to_contain_text(re.compile(r"step \d+ of 0–\d+"))
    k, n = re.search(r"step\s+(\d+)\s+of\s+0–(\d+)", viewer.locator(".gl-status").text_content()).groups()
    slider = viewer.locator(".gl-slider")
    playwright_sync.expect(slider.locator(".widget-readout")).to_have_text(k)
    handle = slider.locator(".noUi-handle")
    playwright_sync.expect(handle).to_have_attribute("aria-valuenow", re.compile(rf"^{k}(\.0+)?$"))
    playwright_sync.expect(handle).to_have_attribute("aria-valuemax", re.compile(rf"^{n}(\.0+)?$"))
    return int(k)


def open_and_run_all(page, base: str, token: str, name: str) -> None:
    # a workspace of its own, so JupyterLab restores no other notebook (whose kernel would answer "Idle")
    page.goto(f"{base}/lab/workspaces/{Path(name).stem}/tree/{name}?token={token}")
    page.wait_for_selector(".jp-NotebookPanel .jp-Cell")
    accept_kernel_dialog(page)
    wait_idle(page)
    news = page.locator(".Toastify__toast", has_text="Jupyter news").get_by_role("button", name="No", exact=True)
    if news.count():
        news.first.click()  # the news prompt would cover the widgets in the screenshots
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()


@contextlib.contextmanager
def notebook_page(jupyterlab, notebook: str, failure: str):
    """A Chromium page with ``notebook`` opened and every cell run; a full-page screenshot named
    ``failure`` when the block fails."""
    base, token = jupyterlab
    SCREENSHOTS.mkdir(exist_ok=True)
    (SCREENSHOTS / failure).unlink(missing_ok=True)
    playwright_sync.expect.set_options(timeout=WAIT_MS)
    with playwright_sync.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = None
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.set_default_timeout(WAIT_MS)
            open_and_run_all(page, base, token, notebook)
            yield page
        except BaseException:
            if page is not None:
                page.screenshot(path=str(SCREENSHOTS / failure), full_page=True)
            raise
        finally:
            browser.close()


def test_viewer_and_stepper_render_and_respond(jupyterlab):
    with notebook_page(jupyterlab, "06_widgets.ipynb", "failure.png") as page:
        viewer = page.locator(".gl-viewer").first  # the standalone viewer (its cell comes first)
        status = viewer.locator(".gl-status")
        # the notebook's own last cells click next once and step the stepper twice
        playwright_sync.expect(status).to_contain_text("step 1 of 0–3", timeout=WAIT_MS)
        playwright_sync.expect(status).to_contain_text("reward 0")
        wait_idle(page)
        page.locator(".gl-live").first.scroll_into_view_if_needed()
        summary = page.locator(".gl-live .gl-summary").first
        playwright_sync.expect(summary).to_contain_text("20 of 20")
        playwright_sync.expect(summary).to_contain_text("over 16 unmasked of 20")
        playwright_sync.expect(page.locator(".gl-live .gl-failures").first).to_contain_text("provider_unavailable")
        page.locator(".gl-live").first.screenshot(path=str(SCREENSHOTS / "live_panel.png"))
        viewer.scroll_into_view_if_needed()
        assert expect_slider_in_step(viewer) == 1
        viewer.screenshot(path=str(SCREENSHOTS / "viewer_step2.png"))

        viewer.locator(".gl-next").click()
        playwright_sync.expect(status).to_contain_text("step 2 of 0–3")
        assert expect_slider_in_step(viewer) == 2
        viewer.locator(".gl-next").click()
        playwright_sync.expect(status).to_contain_text("step 3 of 0–3")
        assert expect_slider_in_step(viewer) == 3
        playwright_sync.expect(status).to_contain_text("reward 1")
        playwright_sync.expect(viewer.locator(".gl-conversation")).to_contain_text("The counter reads 3.")
        playwright_sync.expect(viewer.locator(".gl-next button, button.gl-next").first).to_be_disabled()
        viewer.screenshot(path=str(SCREENSHOTS / "viewer_step4.png"))

        browse_run(page.locator(".gl-viewer").nth(1))  # the run browser (its cell comes second)

        stepper = page.locator(".gl-stepper").first
        stepper.scroll_into_view_if_needed()
        s_status = stepper.locator(".gl-status")
        playwright_sync.expect(s_status).to_contain_text("step 1 of 0–1")
        assert expect_slider_in_step(stepper) == 1  # the slider follows the stepper's steps
        stepper.locator(".gl-arguments input").fill('{"by": 1}')
        stepper.locator(".gl-arguments input").press("Enter")
        stepper.locator(".gl-step-button").click()
        playwright_sync.expect(s_status).to_contain_text("step 2 of 0–2")
        assert expect_slider_in_step(stepper) == 2
        playwright_sync.expect(stepper.locator(".gl-conversation")).to_contain_text('{"count":3}')
        stepper.locator(".gl-model-button").click()  # the policy sees 3 and answers
        playwright_sync.expect(s_status).to_contain_text("step 3 of 0–3")
        assert expect_slider_in_step(stepper) == 3
        playwright_sync.expect(s_status).to_contain_text("episode reward 0")
        stepper.locator(".gl-verify-button").click()
        playwright_sync.expect(stepper.locator(".gl-message")).to_contain_text("verified: reward 1")
        playwright_sync.expect(s_status).to_contain_text("reward 1")
        playwright_sync.expect(s_status).to_contain_text("episode reward 1")
        stepper.screenshot(path=str(SCREENSHOTS / "stepper_verified.png"))
        page.screenshot(path=str(SCREENSHOTS / "jupyterlab.png"), full_page=True)


def browse_run(run) -> None:
    """Filter the run browser (failure kind, then reward), browse what matches, and keep the slider in step."""
    run.scroll_into_view_if_needed()
    matches = run.locator(".gl-matches")
    playwright_sync.expect(matches).to_contain_text("episode 1 of 20 shown · 20 of 20 episodes match")
    expect_slider_in_step(run)

    run.locator(".gl-failure-filter select").select_option(label="provider_unavailable (4)")
    playwright_sync.expect(matches).to_contain_text("4 of 20 episodes match")
    playwright_sync.expect(run.locator(".gl-status")).to_contain_text("masked: provider_unavailable")
    run.screenshot(path=str(SCREENSHOTS / "run_browser_failures.png"))

    run.locator(".gl-failure-filter select").select_option(label="no failure (16)")
    run.locator(".gl-reward-filter select").select_option(label="reward 0 (8)")  # 4 masked, 4 that guessed
    playwright_sync.expect(matches).to_contain_text("episode 1 of 4 shown · 4 of 20 episodes match")
    playwright_sync.expect(run.locator(".gl-conversation")).to_contain_text("The counter reads 12.")
    run.locator(".gl-next-episode").click()
    playwright_sync.expect(matches).to_contain_text("episode 2 of 4 shown")
    assert expect_slider_in_step(run) == 0  # a guess without the work: one step, step 0

    run.locator(".gl-reward-filter select").select_option(label="reward 1 (12)")
    playwright_sync.expect(matches).to_contain_text("episode 1 of 12 shown · 12 of 20 episodes match")
    assert expect_slider_in_step(run) == 3  # from a one-step episode to a four-step one (steps 0-3)
    run.locator(".gl-reward-filter select").select_option(label="any reward")
    playwright_sync.expect(matches).to_contain_text("16 of 20 episodes match")  # still: no failure
    episode = run.locator(".gl-episode select")
    for task, steps in (("task 3 · repeat 0", 1), ("task 2 · repeat 3", 4)):  # the guess; 2 -> 5, step by step
        label = episode.locator("option", has_text=task).inner_text()
        episode.select_option(label=label)
        playwright_sync.expect(run.locator(".gl-status")).to_contain_text(f"step {steps - 1} of 0–{steps - 1}")
        assert expect_slider_in_step(run) == steps - 1
        assert label.replace("\xa0", " ").endswith(f"· {steps} step" + "s" * (steps > 1))
    run.locator(".gl-prev").click()
    playwright_sync.expect(run.locator(".gl-status")).to_contain_text("step 2 of 0–3")
    assert expect_slider_in_step(run) == 2
    run.screenshot(path=str(SCREENSHOTS / "run_browser_filtered.png"))


def test_first_environment_notebook_runs_in_jupyterlab(jupyterlab):
    """Notebook 02b, run top to bottom as a newcomer would: no cell fails and its frames render."""
    with notebook_page(jupyterlab, "02b_your_first_environment.ipynb", "failure_first_environment.png") as page:
        cells = page.locator(".jp-NotebookPanel .jp-CodeCell")
        count = cells.count()
        # the last code cell (lab.close()) has run once its prompt shows a number
        playwright_sync.expect(cells.nth(count - 1).locator(".jp-InputPrompt")).to_have_text(re.compile(r"\[\d+\]"))
        wait_idle(page)
        assert page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']").count() == 0
        outputs = page.locator(".jp-NotebookPanel .jp-OutputArea-output")
        playwright_sync.expect(outputs.filter(has_text="{'hint': 'higher', 'guesses': 1}")).to_have_count(1)
        frames = page.locator(".jp-NotebookPanel .jp-OutputArea-output table")
        playwright_sync.expect(frames.first).to_be_visible()
        assert frames.count() >= 4  # before, after, after.steps and the Gymnasium steps
        page.screenshot(path=str(SCREENSHOTS / "first_environment_end.png"))
        outputs.filter(has_text="{'hint': 'higher', 'guesses': 1}").scroll_into_view_if_needed()
        page.screenshot(path=str(SCREENSHOTS / "first_environment_by_hand.png"))


# -- a new notebook in `make lab` -----------------------------------------------------------------------

PLOT = (
    "import pandas as pd; from gymlab.lab import plots; "
    "plots.reward_distribution(pd.DataFrame({'task': [0, 0, 1, 1], 'reward': [1.0, 0.0, 1.0, 1.0]}))"
)


def test_a_new_notebook_in_make_lab_shows_a_plot_as_an_image(jupyterlab):
    """A new notebook, one plot call and no `%matplotlib` magic: the cell's output is an image."""
    base, token = jupyterlab
    SCREENSHOTS.mkdir(exist_ok=True)
    playwright_sync.expect.set_options(timeout=WAIT_MS)
    with playwright_sync.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.set_default_timeout(WAIT_MS)
        try:
            page.goto(f"{base}/lab/workspaces/new_plot?token={token}")  # no notebook open: the launcher
            page.locator(".jp-LauncherCard[data-category='Notebook']").first.click()
            page.wait_for_selector(".jp-NotebookPanel .jp-Cell")
            accept_kernel_dialog(page)
            wait_idle(page)
            editor = page.locator(".jp-NotebookPanel .jp-Cell .cm-content").first
            editor.click()
            editor.fill(PLOT)
            editor.press("Shift+Enter")
            output = page.locator(".jp-NotebookPanel .jp-OutputArea-output").first
            image = output.locator("img")
            playwright_sync.expect(image).to_be_visible()
            assert image.get_attribute("src").startswith("data:image/png;base64,")
            assert "<Figure size" not in output.inner_text()
            assert page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.error']").count() == 0
            page.screenshot(path=str(SCREENSHOTS / "new_notebook_plot.png"))
        except BaseException:
            page.screenshot(path=str(SCREENSHOTS / "failure_new_notebook_plot.png"), full_page=True)
            raise
        finally:
            browser.close()
