"""The public surface: every exported name resolves, and ``import gymlab`` stays light."""

import subprocess
import sys

import gymlab

HEAVY = ["pandas", "matplotlib", "ipywidgets", "gymnasium", "openai", "fastapi", "uvicorn", "aiohttp"]


def test_every_exported_name_resolves():
    for name in gymlab.__all__:
        assert getattr(gymlab, name) is not None, name


def test_import_is_light():
    code = "import sys, gymlab; print(','.join(m for m in %r if m in sys.modules))" % HEAVY
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "", f"import gymlab loaded: {out}"


def test_lab_import_leaves_data_and_plot_libraries_unloaded():
    code = "import sys, gymlab; gymlab.Lab; print(','.join(m for m in ('pandas','matplotlib','ipywidgets') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == ""


def test_unknown_name_is_an_attribute_error():
    import pytest

    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        gymlab.Nope  # noqa: B018
