"""Whether a TextArena game runs here, told without downloading anything: its modules (read, not imported)
parse on this Python, ask no hosted model and find the NLTK data they would download installed."""

from __future__ import annotations

import ast
import contextlib
import functools
import importlib
import io
import os
import re
import sys
import warnings
from pathlib import Path
from typing import Any

from gymlab.envs.extras import need

_NLTK_DOWNLOAD = re.compile(r"(?:nltk\.)?download\(\s*(\[[^\]]*\]|['\"][^'\"]+['\"])")


class GameUnavailable(RuntimeError):
    """A TextArena game that cannot run here (the message says why and what to do)."""


@functools.cache  # once per game and process (a game that fails raises again: exceptions are not cached)
def check_offline(env_id: str) -> None:
    """``LookupError`` for an unknown id; ``GameUnavailable`` for a game whose modules do not parse here, ask a
    hosted model or would download NLTK data; then the game's module imported, downloads answered locally."""
    ta = need("textarena")
    from textarena.envs.registration import ENV_REGISTRY

    if env_id not in ENV_REGISTRY:
        close = [k for k in ENV_REGISTRY if k.lower().startswith(env_id.split("-")[0].lower())][:8]
        raise LookupError(f"no TextArena game {env_id!r}; e.g. {', '.join(close or sorted(ENV_REGISTRY)[:8])}")
    entry = ENV_REGISTRY[env_id].entry_point
    module = entry.split(":")[0] if isinstance(entry, str) else entry.__module__
    text = "\n".join(game_sources(Path(ta.__file__).parent, module, env_id).values())
    if "OpenRouter" in text or "openrouter.ai" in text:
        raise GameUnavailable(
            f"TextArena game {env_id} asks a hosted model on OpenRouter (an API key in OPENROUTER_API_KEY and "
            "the network); gymlab serves only games that run offline"
        )
    missing = [n for n in nltk_wanted(text) if not nltk_has(n)]
    if missing:
        import nltk

        raise GameUnavailable(
            f"TextArena game {env_id} needs NLTK data {', '.join(missing)} (it would download it), not found in "
            f"{os.pathsep.join(nltk.data.path)}; install it once with "
            f"`python -m nltk.downloader {' '.join(missing)}` (gymlab downloads nothing)"
        )
    try:
        with no_downloads():
            importlib.import_module(module)
    except ImportError as exc:
        raise GameUnavailable(f"TextArena game {env_id} does not import here: {exc}") from None


def game_sources(root: Path, module: str, env_id: str) -> dict[str, str]:
    """The source of ``module`` and of every ``textarena.envs`` module it imports, transitively, by file."""
    found: dict[str, str] = {}
    todo, seen = [module], set()
    while todo:
        name = todo.pop()
        if name in seen or not name.startswith("textarena.envs."):
            continue
        seen.add(name)
        base = root.joinpath(*name.split(".")[1:])
        path = next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)
        if path is None:
            continue
        source = path.read_text(errors="replace")
        found[str(path.relative_to(root.parent))] = source
        try:
            with warnings.catch_warnings():  # the game's own warnings (invalid escapes) are not ours to show
                warnings.simplefilter("ignore")
                tree = ast.parse(source)
        except SyntaxError as exc:
            raise GameUnavailable(
                f"TextArena game {env_id} does not compile on Python {sys.version_info.major}."
                f"{sys.version_info.minor} ({path.relative_to(root.parent)}, line {exc.lineno}: {exc.msg})"
            ) from None
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                todo += [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                parts = package.split(".")
                head = ".".join(parts[: len(parts) - node.level + 1]) if node.level else ""
                target = ".".join(p for p in (head, node.module or "") if p)
                todo += [target, *(f"{target}.{a.name}" for a in node.names)]
    return found


def nltk_wanted(source: str) -> list[str]:
    """The NLTK data ``source`` downloads (``nltk.download("words")``), in order, once each."""
    found = [n for call in _NLTK_DOWNLOAD.findall(source) for n in re.findall(r"['\"]([^'\"]+)['\"]", call)]
    return list(dict.fromkeys(found))


def nltk_has(name: str) -> bool:
    """Whether the NLTK data ``name`` is installed (False when NLTK is not)."""
    try:
        import nltk
    except ImportError:
        return False
    for kind in ("corpora", "taggers", "tokenizers", "chunkers", "misc"):
        for path in (f"{kind}/{name}", f"{kind}/{name}.zip"):
            try:
                nltk.data.find(path)
                return True
            except LookupError:
                continue
    return False


@contextlib.contextmanager
def no_downloads():
    """``nltk.download`` answered from the local data (True when installed), else refused: never a fetch."""
    try:
        import nltk
    except ImportError:
        yield
        return

    def download(info_or_id: Any = None, *args: Any, **kwargs: Any) -> bool:
        names = info_or_id if isinstance(info_or_id, (list, tuple)) else [info_or_id]
        missing = [str(n) for n in names if not (isinstance(n, str) and nltk_has(n))]
        if missing:
            raise GameUnavailable(f"the game would download NLTK data {', '.join(missing)} (gymlab downloads nothing)")
        return True

    original, nltk.download = nltk.download, download
    try:
        yield
    finally:
        nltk.download = original


def reset_problem(env_id: str) -> str | None:
    """Why ``env_id`` does not make and reset here (a file or module its wheel lacks, a download), or None.
    Tried with one and two players; a game refusing only the player count is not a problem."""
    ta = need("textarena")
    failures: list[BaseException] = []
    for count in (1, 2):
        try:
            with no_downloads(), contextlib.redirect_stdout(io.StringIO()):
                ta.make(env_id).reset(num_players=count, seed=0)
            return None
        except Exception as exc:  # whatever the game raises is reported, as its type and message
            failures.append(exc)
    real = [e for e in failures if not isinstance(e, (AssertionError, ValueError))]
    return f"does not reset here: {type(real[0]).__name__}: {str(real[0])[:160]}" if real else None
