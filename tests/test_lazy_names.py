"""The packages that load their names lazily (``gymlab._lazy.lazy_names``) answer alike: ``dir`` is their
``__all__``, an unknown name an ``AttributeError`` naming the package, a known one its module's object, kept."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

PACKAGES = ["gymlab", "gymlab.lab"]  # gymlab.envs and gymlab.train import their modules, which load no library


@pytest.mark.parametrize("package", PACKAGES)
def test_dir_is_all_and_an_unknown_name_names_the_package(package):
    module = importlib.import_module(package)
    assert dir(module) == list(module.__all__) and module.__all__
    with pytest.raises(AttributeError, match=f"module '{package}' has no attribute 'no_such_name'"):
        module.no_such_name  # noqa: B018


def test_a_name_loads_from_its_module_once_and_a_module_name_is_the_module():
    import gymlab
    import gymlab.lab
    from gymlab.lab.runs import Rollouts

    assert gymlab.lab.Rollouts is Rollouts and vars(gymlab.lab)["Rollouts"] is Rollouts
    assert gymlab.envs is importlib.import_module("gymlab.envs")


def test_a_name_stays_the_function_when_its_module_has_its_name():
    """``gymlab.envs.as_openenv`` is a function in a module of that name, which its import sets on the package:
    the loaded function is kept over it (in a fresh process: another test may have imported the module)."""
    code = (
        "import gymlab.envs as e; first, second = e.as_openenv, e.as_openenv; "
        "assert callable(first) and second is first, (first, second)"
    )
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
