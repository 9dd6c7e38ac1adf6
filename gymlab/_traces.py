"""Errors in a notebook: one line each (``LogBook``; traces kept for ``lab.logs()``), tracebacks cut to the
researcher's frames (``user_traceback``)."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import sysconfig
import tempfile
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType


def _folder(path: str | os.PathLike) -> str:
    return str(Path(path).resolve()) + os.sep


_PACKAGE = _folder(Path(__file__).parent)
_EXAMPLES = _PACKAGE + "environments" + os.sep
_LIBRARY = tuple(
    {_folder(p) for key in ("stdlib", "platstdlib", "purelib", "platlib") if (p := sysconfig.get_path(key))}
)


def is_user_file(filename: str) -> bool:
    """True for code the researcher wrote: a notebook cell, a script, an example environment."""
    if filename.startswith("<frozen "):
        return False
    try:
        path = str(Path(filename).resolve())
    except (OSError, ValueError):
        return True
    return path.startswith(_EXAMPLES) or not path.startswith((_PACKAGE, *_LIBRARY))


def user_traceback(tb: TracebackType | None) -> TracebackType | None:
    """``tb`` with only the user's frames (None when it has none)."""
    kept = []
    while tb is not None:
        if is_user_file(tb.tb_frame.f_code.co_filename):
            kept.append(tb)
        tb = tb.tb_next
    head = None
    for entry in reversed(kept):
        head = TracebackType(head, entry.tb_frame, entry.tb_lasti, entry.tb_lineno)
    return head


def user_frames(exc: BaseException) -> list[str]:
    """IPython's rendering of ``exc`` with only the user's frames (its ``_render_traceback_`` hook)."""
    from IPython import get_ipython

    tb = user_traceback(exc.__traceback__) or exc.__traceback__
    return get_ipython().InteractiveTB.structured_traceback(type(exc), exc, tb)


def ipython_shell():
    """The running IPython shell, or None (a script, a test): IPython is not imported for this."""
    ipython = sys.modules.get("IPython")
    return ipython.get_ipython() if ipython is not None and hasattr(ipython, "get_ipython") else None


def where(exc: BaseException) -> str | None:
    """``File "...", line N, in f`` of the innermost user frame that ``exc`` passed through."""
    frames = [frame for frame in traceback.extract_tb(exc.__traceback__) if is_user_file(frame.filename)]
    return f"{_file_label(frames[-1].filename)}, line {frames[-1].lineno}, in {frames[-1].name}" if frames else None


def _file_label(filename: str) -> str:
    """``Cell In[36]`` for a notebook cell's code (IPython's name for it), else ``File "path"``."""
    shell = ipython_shell()
    try:
        label = shell.compile.format_code_name(filename) if shell is not None else None
    except Exception:  # an IPython without it: the path is still right
        label = None
    return f"{label[0]} {label[1]}" if label else f'File "{filename}"'


#: The folders an error body leaves out (longest first, so a folder inside another goes whole).
#: A folder that is the file system's root (a server started in /) is not left out: it starts every path.
_HOMES = (_folder(p) for p in (os.getcwd(), Path.home(), tempfile.gettempdir()) if Path(p).resolve().name)
_ROOTS = sorted({_PACKAGE, *_LIBRARY, *_HOMES}, key=len, reverse=True)
_FILE = re.compile(r'File "([^"]*)"')


def without_paths(text: str) -> str:
    """``text`` for an error body: traceback files by their base names, the machine's folders left out."""
    text = _FILE.sub(lambda m: f'File "{os.path.basename(m[1])}"', text)
    for root in _ROOTS:
        text = text.replace(root, "")
    return text


def cause_line(exc: BaseException) -> str:
    """``ZeroDivisionError: division by zero (Cell In[3], line 3, in verify)``."""
    place = where(exc)
    return f"{type(exc).__name__}: {exc}" + (f" ({place})" if place else "")


class Interrupted(KeyboardInterrupt):
    """A ``KeyboardInterrupt`` that IPython shows as its one line (the frames are gymlab's, not the cell's)."""

    def _render_traceback_(self) -> list[str]:
        return [str(self)]


@dataclass(frozen=True)
class Entry:
    """One logged error: when, which logger, the one line shown, and the full trace."""

    time: float
    logger: str
    line: str
    trace: str

    def __str__(self) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(self.time))
        return f"[{stamp}] {self.line}\n{self.trace}".rstrip()


class LogBook(logging.Handler):
    """Keeps every error record (bounded) and prints one line per error unless quieted."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.entries: deque[Entry] = deque(maxlen=500)
        self._quiet = 0
        self._lock_quiet = threading.Lock()
        self._held: list[str] | None = None

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
            trace = ""
            lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
            if len(lines) > 1:  # a message that is a whole trace (uvicorn logs a failed startup so)
                message, trace = lines[-1], message
            if record.exc_info and record.exc_info[1] is not None:
                exc = record.exc_info[1]
                message = f"{message}: {cause_line(exc)}"
                trace = "".join(traceback.format_exception(exc))
            line = f"{record.levelname.lower()}: {message}"
            self.entries.append(Entry(record.created, record.name, line, trace))
            if not self._quiet:
                hint = " · lab.logs() has the trace" if trace else ""
                self._print(f"gymlab {line}{hint}")
        except Exception:  # a log handler never raises into the code that logged
            self.handleError(record)

    def _print(self, text: str) -> None:
        with self._lock_quiet:
            if self._held is not None:
                self._held.append(text)
                return
        print(text, file=sys.stderr, flush=True)

    @contextlib.contextmanager
    def held(self):
        """Lines inside printed at the end if the block succeeds, else dropped (entries kept either way)."""
        with self._lock_quiet:
            outer, self._held = self._held, []
        ok = False
        try:
            yield
            ok = True
        finally:
            with self._lock_quiet:
                lines, self._held = self._held, outer
            for text in lines if ok else ():
                self._print(text)

    @contextlib.contextmanager
    def quiet(self):
        """No lines printed inside (a run prints its own summary); entries are still kept."""
        with self._lock_quiet:
            self._quiet += 1
        try:
            yield
        finally:
            with self._lock_quiet:
                self._quiet -= 1


_book: LogBook | None = None
_book_lock = threading.Lock()


def logbook() -> LogBook:
    """The process's one ``LogBook``, put back on the error loggers on each call (a logging config drops it)."""
    global _book
    with _book_lock:
        if _book is None:
            _book = LogBook()
        for name in ("gymlab", "uvicorn.error"):  # the loggers a Lab's servers write errors to
            logger = logging.getLogger(name)
            if _book not in logger.handlers:
                logger.addHandler(_book)
        return _book
