"""Run a tutorial notebook in a real kernel (nbclient) and ask the kernel what it holds afterwards.

Notebooks carry no checks of their own: a test passes ``probe``, a Python expression of a JSON-able
dict, which runs as an extra cell in the same kernel (before the notebook's closing ``lab.close()``
cell, so its servers still answer) and comes back to the test as that dict.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import nbformat
from jupyter_client.kernelspec import KernelSpec
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parents[2] / "notebooks"


def read(name: str) -> nbformat.NotebookNode:
    """The committed notebook, checked to be stored without outputs."""
    book = nbformat.read(NOTEBOOKS / name, as_version=4)
    code = [c for c in book.cells if c.cell_type == "code"]
    assert all(not c.get("outputs") and c.get("execution_count") is None for c in code), (
        f"{name} is committed with outputs"
    )
    return book


class TestVenvKernel(AsyncKernelManager):
    """A kernel of the Python running the tests (the test venv, which has the ``train`` extra), whatever
    kernel spec JUPYTER_PATH puts first (the demo venv's, made with the ``lab`` extra only)."""

    @property
    def kernel_spec(self) -> KernelSpec:
        argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
        return KernelSpec(argv=argv, display_name="gymlab test venv", language="python")


def run_notebook(name: str, probe: str, *, test_venv: bool = False) -> tuple[dict[str, Any], list[dict]]:
    """Execute ``notebooks/<name>`` with ``probe`` evaluated in its kernel (the demo venv's; ``test_venv``:
    the test venv's); return the probe's value and the outputs of the notebook's own cells."""
    book = read(name)
    cell = nbformat.v4.new_code_cell(
        f"from IPython.display import display as _probe_display\n_probe_display({{'application/json': {probe}}}, raw=True)"
    )
    closing = [i for i, c in enumerate(book.cells) if c.cell_type == "code" and c.source.strip() == "lab.close()"]
    book.cells.insert(closing[-1] if closing else len(book.cells), cell)
    # deadlines for a loaded CI machine: per cell, and for the kernel to start
    kernel = {"kernel_manager_class": TestVenvKernel} if test_venv else {}
    NotebookClient(
        book,
        timeout=600,
        startup_timeout=180,
        iopub_timeout=60,  # a cell's last outputs after its reply, on a loaded machine (4 s by default)
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS)}},
        **kernel,
    ).execute()
    found = [o["data"]["application/json"] for o in cell.outputs if "application/json" in o.get("data", {})]
    assert len(found) == 1, f"the probe of {name} answered {cell.outputs}"
    outputs = [o for c in book.cells if c.cell_type == "code" and c is not cell for o in c.outputs]
    return found[0], outputs


def html_of(outputs: list[dict]) -> str:
    return "".join(o.get("data", {}).get("text/html", "") for o in outputs)


def text_of(outputs: list[dict]) -> str:
    return "".join(o.get("text", "") + o.get("data", {}).get("text/plain", "") for o in outputs)
