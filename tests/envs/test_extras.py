"""Each adapter's library is an extra: without it, the adapter says which extra installs it."""

from __future__ import annotations

import subprocess
import sys

import pytest

from gymlab import envs

CALLS = {
    "reasoning_gym": (lambda: envs.reasoning_gym("chain_sum"), "reasoning-gym"),
    "textarena": (lambda: envs.textarena("TicTacToe-v0"), "textarena"),
    "gymnasium": (lambda: envs.gymnasium("FrozenLake-v1"), "gymnasium"),
    "openenv": (lambda: envs.openenv("http://127.0.0.1:9"), "openenv"),
    "verifiers": (lambda: envs.verifiers(object()), "verifiers"),
}


@pytest.mark.parametrize("library", CALLS)
def test_a_missing_library_names_the_extra(monkeypatch, library):
    from gymlab.envs.extras import LIBRARIES

    call, extra = CALLS[library]
    for module in {library, LIBRARIES[library][0]}:  # the module the adapter imports may be loaded already
        monkeypatch.setitem(sys.modules, module, None)  # what an environment without it sees on import
    with pytest.raises(ImportError, match=rf"pip install 'gymlab\[{extra}\]'"):
        call()


def test_importing_gymlab_envs_imports_no_library():
    code = (
        "import sys, gymlab.envs as e; e.ReasoningGymServer; e.TextArenaServer; e.GymEnvServer; e.OpenEnvServer; "
        "e.as_openenv; e.VerifiersServer; "
        "print(sorted(m for m in ('reasoning_gym', 'textarena', 'gymnasium', 'openenv', 'verifiers') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_an_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="gymlab.envs.*nope"):
        envs.nope  # noqa: B018
