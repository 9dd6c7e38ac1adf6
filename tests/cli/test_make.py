"""The commands of day one: what `make demo` installs, and `make lab` serving the notebooks on loopback with a token."""

from __future__ import annotations

import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import httpx
import pytest

from gymlab.testing.workers import wait_until
from tests.jupyterlab_status import answers

ROOT = Path(__file__).resolve().parents[2]
VENV = Path(sys.executable).parent.parent  # the venv these tests run in stands in for .venv
TEST_TOOLS = {"pytest", "pytest-asyncio", "playwright", "nbclient", "schemathesis", "ruff", "openai"}

pytestmark = pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")


def make_n(target: str) -> str:
    """The commands `make <target>` would run on a fresh checkout (nothing is run)."""
    return subprocess.run(
        ["make", "-n", "-B", target, "VENV=/nonexistent/venv"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout


def names(requirements: list[str]) -> set[str]:
    return {re.split(r"[<>=\[ ]", r, maxsplit=1)[0] for r in requirements}


def test_demo_installs_the_lab_and_not_the_test_tools():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    # JupyterLab, its kernel, and what the notebooks import (09 the MCP SDK, 05 datasets, 10 reasoning-gym
    # and TextArena): every notebook runs after `make lab` (tests/notebooks runs them in a venv made by this recipe)
    assert names(extras["lab"]) == {"jupyterlab", "ipykernel", "mcp", "datasets", "reasoning-gym", "textarena"}
    assert not names(extras["lab"]) & TEST_TOOLS
    demo = make_n("demo")
    installs = [line for line in demo.splitlines() if "pip install" in line]
    assert installs[-1].endswith("pip install -q -e '.[lab]'")  # after pip itself is upgraded
    assert not any(extra in line for line in installs for extra in ("dev", "browser", "gymnasium"))
    assert "gymlab demo" in demo and "make lab" in demo  # it ends by saying what to open next
    test = make_n("test")
    assert "pip install -q -e '.[lab,dev,browser,train]'" in test  # make test still installs everything


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_workspace_is_copies_of_the_tutorials_and_a_later_make_keeps_its_edits(tmp_path):
    """`make lab` opens copies: a researcher's edits stay, tutorials added later arrive, none is overwritten."""
    workspace = tmp_path / "workspace"

    def make_workspace() -> None:
        subprocess.run(["make", "-s", "workspace", f"WORKSPACE={workspace}"], cwd=ROOT, check=True)

    make_workspace()
    tutorials = sorted(p.name for p in (ROOT / "notebooks").iterdir() if p.suffix in (".ipynb", ".md"))
    assert sorted(p.name for p in workspace.iterdir() if not p.name.startswith(".")) == tutorials
    (workspace / "01_quickstart.ipynb").write_text("my edits")
    (workspace / "03_step_through.ipynb").unlink()  # as if it were a tutorial added after the first make lab
    (workspace / "mine.ipynb").write_text("{}")
    make_workspace()
    assert (workspace / "01_quickstart.ipynb").read_text() == "my edits"
    assert (workspace / "03_step_through.ipynb").read_bytes() == (
        ROOT / "notebooks" / "03_step_through.ipynb"
    ).read_bytes()
    assert (workspace / "mine.ipynb").exists()


def test_the_workspace_names_the_tutorials_changed_upstream_and_offers_the_new_version(tmp_path):
    """A tutorial changed since it was copied is named once: an edited copy stays and the new version is put
    in updated/, a copy with no edits becomes the new version; an edit alone (upstream unchanged) says nothing."""
    workspace = tmp_path / "workspace"

    def make_workspace() -> list[str]:
        done = subprocess.run(
            ["make", "-s", "workspace", f"WORKSPACE={workspace}"], cwd=ROOT, check=True, capture_output=True, text=True
        )
        return done.stdout.splitlines()

    assert make_workspace() == []
    tutorial = lambda name: (ROOT / "notebooks" / name).read_bytes()  # noqa: E731
    copied = workspace / ".tutorials"  # what each copy was made from
    # as if 03 and 04 were copied from older versions: 03 left as copied, 04 edited since; 05 edited (upstream same)
    for name in ("03_step_through.ipynb", "04_reward_curves.ipynb"):
        (copied / name).write_text("the tutorial as it was")
    (workspace / "03_step_through.ipynb").write_text("the tutorial as it was")
    (workspace / "04_reward_curves.ipynb").write_text("my edits")
    (workspace / "05_export_dataset.ipynb").write_text("my other edits")
    said = make_workspace()
    assert said == [
        "03_step_through.ipynb changed upstream; your copy had no edits, so it is now the new version",
        f"04_reward_curves.ipynb changed upstream since you copied it; the new version is {workspace}/updated/"
        "04_reward_curves.ipynb (your copy is kept)",
    ]
    assert (workspace / "03_step_through.ipynb").read_bytes() == tutorial("03_step_through.ipynb")
    assert (workspace / "04_reward_curves.ipynb").read_text() == "my edits"
    assert (workspace / "updated" / "04_reward_curves.ipynb").read_bytes() == tutorial("04_reward_curves.ipynb")
    assert (workspace / "05_export_dataset.ipynb").read_text() == "my other edits"
    assert make_workspace() == []  # said once


def test_make_lab_serves_the_notebooks_on_loopback_with_a_token(tmp_path):
    pytest.importorskip("jupyterlab")
    port = free_port()
    workspace = tmp_path / "workspace"
    committed = (ROOT / "notebooks" / "01_quickstart.ipynb").read_bytes()
    env = {**os.environ, "JUPYTER_RUNTIME_DIR": str(tmp_path / "rt"), "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "ws")}
    stamp = VENV / ".installed-lab"  # -o: taken as made, so make installs nothing into this venv
    proc = subprocess.Popen(
        ["make", "-s", "-o", str(stamp), "lab", f"VENV={VENV}", f"LAB_PORT={port}", f"WORKSPACE={workspace}"],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        first = proc.stdout.readline()
        match = re.match(rf"JupyterLab: http://127\.0\.0\.1:{port}/lab/tree/01_quickstart\.ipynb\?token=(\w+)$", first)
        assert match, first
        token = match.group(1)
        base = f"http://127.0.0.1:{port}"

        def ready() -> bool:
            assert proc.poll() is None, proc.stdout.read()
            return answers(base, token)

        wait_until(ready, 120, "make lab: JupyterLab answering")
        assert httpx.get(f"{base}/api/status", timeout=5).status_code == 403  # the token is required
        listing = httpx.get(f"{base}/api/contents", params={"token": token}, timeout=5).json()
        served = {item["name"] for item in listing["content"]}
        assert {"01_quickstart.ipynb", "02b_your_first_environment.ipynb"} <= served  # the tutorials' copies
        # a save (JupyterLab's autosave) with an output lands in the workspace; the tutorial stays as committed
        book = httpx.get(f"{base}/api/contents/01_quickstart.ipynb", params={"token": token}, timeout=10).json()
        book["content"]["cells"][1]["outputs"] = [{"output_type": "stream", "name": "stdout", "text": "ran\n"}]
        book["content"]["cells"][1]["execution_count"] = 1
        saved = httpx.put(
            f"{base}/api/contents/01_quickstart.ipynb",
            params={"token": token},
            json={"type": "notebook", "format": "json", "content": book["content"]},
            timeout=10,
        )
        assert saved.status_code == 200, saved.text
        assert '"ran\\n"' in (workspace / "01_quickstart.ipynb").read_text()
        assert (ROOT / "notebooks" / "01_quickstart.ipynb").read_bytes() == committed
        argv = Path(f"/proc/{proc.pid}/cmdline")
        assert not argv.exists() or token not in argv.read_text()  # the token is not on a command line
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
