"""Run ``layouts.py`` for this checkout (and another, with ``--against``) and print the tables.

Each checkout is measured in a fresh subprocess with its own ``gymlab`` first on ``PYTHONPATH``, the
same measuring code (this package's ``layouts.py``, run by path) and the same rows. A stack of
``asyncio`` hides httptools and uvloop from that subprocess (a folder of stand-in modules that raise
``ImportError``), so uvicorn runs on h11 and the standard loop there, as it does where they are not
installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

LAYOUTS = Path(__file__).with_name("layouts.py")
HIDDEN = ("httptools", "uvloop")


def _run(root: Path, sections: list[str], quick: bool, stack: str, hide_dir: str) -> dict[str, Any]:
    path = [str(root)]
    env = dict(os.environ)
    if stack == "asyncio":
        path.insert(0, hide_dir)
        env["GYMLAB_SERVER_STACK"] = "asyncio"
    if env.get("PYTHONPATH"):
        path.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(path)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "figures.json"
        cmd = [sys.executable, str(LAYOUTS), "--json", str(out), "--sections", *sections, *(["--quick"] * quick)]
        done = subprocess.run(cmd, env=env, cwd=tmp, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"the layouts benchmark for {root} failed:\n{done.stderr[-3000:]}")
        return json.loads(out.read_text())


def measure_layouts(
    sections: list[str],
    quick: bool,
    stack: str = "installed",
    against: str | None = None,
    against_stack: str = "asyncio",
) -> dict[str, Any]:
    """``{"layouts": figures of this checkout, "against": {...}}`` (the last when asked), section by section."""
    import gymlab

    here = Path(gymlab.__file__).resolve().parents[1]  # the checkout whose gymlab this process imports
    with tempfile.TemporaryDirectory() as hide_dir:
        for name in HIDDEN:
            os.makedirs(os.path.join(hide_dir, name))
            Path(hide_dir, name, "__init__.py").write_text(
                f'raise ImportError("{name} is hidden: the benchmark measures the asyncio stack here")\n'
            )
        result: dict[str, Any] = {"layouts": {"checkout": str(here)}}
        if against:
            result["against"] = {"checkout": str(Path(against).resolve())}
        for section in sections:  # one section of each after the other: all see about the same load
            result["layouts"].update(_run(here, [section], quick, stack, hide_dir))
            if against:
                result["against"].update(_run(Path(against).resolve(), [section], quick, against_stack, hide_dir))
    return result


def _f(value: float, digits: int = 1) -> str:
    return f"{value:,.{digits}f}"


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def print_layouts(measured: dict[str, Any]) -> None:
    now, then = measured["layouts"], measured.get("against")
    print(f"\nserver stack: {now['stack']}" + (f"; --against {then['checkout']}: {then['stack']}" if then else ""))
    titles = {
        "process": "process layout (`gymlab serve`: environment, model and agent processes; CPU = theirs)",
        "lab": "Lab layout (a Lab in this process; CPU = the whole process, client included)",
    }
    for section, title in titles.items():
        if section not in now:
            continue
        print(f"\n[{section}] calculator episodes: {title}")
        header = ["conc", "episodes", "eps/s", "bare eps/s", "of bare", "CPU ms/ep", "bare CPU", "x bare"]
        if then:
            header += ["before eps/s", "speed-up", "before CPU", "CPU cut"]
        rows = []
        for i, point in enumerate(now[section]["gymlab"]):
            bare = now[section]["bare"][i]
            row = [
                str(point["concurrency"]),
                str(point["episodes"]),
                _f(point["episodes/s"]),
                _f(bare["episodes/s"]),
                f"{point['episodes/s'] / bare['episodes/s']:.0%}",
                _f(point["cpu ms/episode"], 2),
                _f(bare["cpu ms/episode"], 2),
                _ratio(point["cpu ms/episode"], bare["cpu ms/episode"]),
            ]
            if then:
                before = then[section]["gymlab"][i]
                row += [
                    _f(before["episodes/s"]),
                    _ratio(point["episodes/s"], before["episodes/s"]),
                    _f(before["cpu ms/episode"], 2),
                    _ratio(before["cpu ms/episode"], point["cpu ms/episode"]),
                ]
            rows.append(row)
        widths = [max(len(h), *(len(r[j]) for r in rows)) for j, h in enumerate(header)]
        print("  " + "  ".join(h.rjust(w) for h, w in zip(header, widths)))
        for r in rows:
            print("  " + "  ".join(c.rjust(w) for c, w in zip(r, widths)))
        if section == "process":
            hop = now["process"]["hop us"]
            line = (
                f"  server CPU per tool call POST /square: gymlab {_f(hop['gymlab'], 0)} us, "
                f"bare {_f(hop['bare'], 0)} us, {_ratio(hop['gymlab'], hop['bare'])} bare"
            )
            if then:
                before = then["process"]["hop us"]["gymlab"]
                line += f"; before {_f(before, 0)} us ({_ratio(before, hop['gymlab'])} now)"
            print(line)
