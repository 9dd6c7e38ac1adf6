"""Every exception class defined under gymlab/ survives a pickle round trip with its fields: errors
cross processes (a Ray cell's ``/run``, a worker, a pool's child) and must arrive whole."""

from __future__ import annotations

import errno
import importlib
import inspect
import pickle
import pkgutil

import pytest

import gymlab
from gymlab.errors import GymlabError, ServerError
from gymlab.protocol.failure_kinds import Failure


def exception_classes() -> list[type[BaseException]]:
    """Every exception class defined at module level in a module of the gymlab package."""
    found = []
    for info in pkgutil.walk_packages(gymlab.__path__, "gymlab."):
        if info.name.startswith("gymlab.environments") or info.name.endswith("__main__"):
            continue  # the example environments (a link in a checkout) and the CLI entry point
        module = importlib.import_module(info.name)
        for value in vars(module).values():
            if inspect.isclass(value) and issubclass(value, BaseException) and value.__module__ == info.name:
                found.append(value)
    return sorted(set(found), key=lambda c: (c.__module__, c.__qualname__))


def sample(name: str, annotation: str):
    """A value for a parameter called ``name`` annotated ``annotation``, unlike any default."""
    if "Failure" in annotation:
        return Failure(kind="transport_timeout", stage="agent", server=f"<{name}>", status=504, message="late")
    if "OSError" in annotation:
        return OSError(errno.ENOSPC, "No space left on device")
    if annotation.startswith("bool"):
        return True
    if annotation.startswith("int"):
        return 7
    if annotation.startswith("float"):
        return 2.5
    if annotation.startswith("str"):
        return f"<{name}>"
    return {"value": [1, name]}  # Any, dicts: something a field must carry through


def instance(cls: type[BaseException]) -> BaseException:
    """``cls`` built from its own ``__init__``, every parameter given (optional ones too)."""
    if not inspect.isfunction(cls.__init__):  # the built-in one: a message
        return cls(f"{cls.__name__}: what went wrong")
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    kwargs = {p.name: sample(p.name, str(p.annotation)) for p in params if p.kind in kinds}
    return cls(**kwargs)


def same(a, b) -> bool:
    if isinstance(a, BaseException):
        return type(a) is type(b) and a.args == b.args
    return a == b


CLASSES = exception_classes()


def test_the_walk_finds_the_error_tree_and_the_others():
    names = {c.__name__ for c in CLASSES}
    assert {"GymlabError", "ServerError", "EpisodeFailed", "UpstreamError", "ReplicaGone", "CellGone"} <= names
    assert {"ComponentFailed", "AnswerTooLarge", "AppDropped"} <= names
    assert all(issubclass(c, GymlabError) for c in CLASSES if c.__module__ == "gymlab.errors")


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_each_exception_class_round_trips_with_its_fields(cls):
    error = instance(cls)
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is cls
    assert back.args == error.args and str(back) == str(error)
    fields = vars(error)
    assert set(vars(back)) == set(fields)
    assert all(same(getattr(back, k), v) for k, v in fields.items()), cls
    if inspect.isfunction(cls.__init__):
        assert any(v not in (None, "", 0) for v in fields.values())  # the sample really set fields


class TransportLike(ServerError):
    """A new error as another part of gymlab may add it: its own ``__init__``, no pickling code."""

    def __init__(self, server: str, url: str, *, budget: float):
        failure = Failure(kind="transport_timeout", server=server, message=f"{url}: no answer in {budget:g} s")
        super().__init__(server, "POST /run", 0, failure.message, "raise the budget", failure)
        self.url, self.budget = url, budget


def test_a_subclass_with_its_own_init_pickles_with_no_code_of_its_own():
    error = TransportLike("agent", "http://127.0.0.1:1", budget=3.0)
    error.add_note("a note travels too")
    back = pickle.loads(pickle.dumps(error, protocol=pickle.HIGHEST_PROTOCOL))
    assert (back.server, back.route, back.status, back.hint, back.url, back.budget) == (
        "agent",
        "POST /run",
        0,
        "raise the budget",
        "http://127.0.0.1:1",
        3.0,
    )
    assert back.failure == error.failure and back.__notes__ == ["a note travels too"]
    assert str(back) == str(error)


def test_an_unpickled_server_error_is_caught_as_its_class():
    error = ServerError("env", "POST /verify", 500, "boom", failure=Failure(kind="verifier_error", message="boom"))
    with pytest.raises(ServerError) as caught:
        raise pickle.loads(pickle.dumps(error))
    assert caught.value.failure.kind == "verifier_error" and caught.value.status == 500
