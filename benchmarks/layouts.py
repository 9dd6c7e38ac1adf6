"""Episodes/s and CPU per episode in both layouts, each beside its bare ceiling on the same server stack.

- **process layout**: ``python -m gymlab serve`` of the calculator config (environment, policy model
  and simple_agent, each its own process); the client POSTs ``/run`` from this process. CPU is the sum
  of the server processes' own CPU time (``/proc/PID/stat``), so the client is not in it.
- **Lab layout**: a ``Lab`` in this process, driven by ``lab.run_many``; CPU is the whole process's
  (``resource.getrusage``), client included.
- **tool-call hop**: server CPU per ``POST /square`` to the calculator process.

The ceiling of each figure is a bare ASGI callable (no framework, it parses the JSON body and answers
JSON) served by uvicorn with the same options, doing the same hops: a bare agent that seeds, asks a
bare model twice, calls the tool once and verifies, over the HTTP client gymlab's own hops use. The
ratio says how far gymlab is from what the server stack itself costs on this machine.

This file runs as a script too (``python layouts.py --json OUT``) and imports from ``gymlab`` only
what every version has (``Lab``, ``examples``, ``gymlab serve``, ``ThreadedServer``), so
``make bench ARGS="--against DIR"`` measures another checkout with the same code in the same run.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import resource
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

CONCURRENCY = (1, 16, 64, 256)
#: No request of the benchmark waits longer than this (a stuck server fails the run instead of hanging it).
REQUEST_TIMEOUT_S = 120.0
#: A canned Responses object: what the bare model answers (a tool call, then a message).
_CALL = {
    "id": "resp_bare",
    "object": "response",
    "model": "bare",
    "status": "completed",
    "output": [{"type": "function_call", "name": "square", "arguments": '{"value": 4}', "call_id": "c1"}],
}
_MESSAGE = {**_CALL, "output": [{"type": "message", "role": "assistant", "content": "The answer is 16."}]}


# -- the bare ASGI app -------------------------------------------------------------------------------

try:  # gymlab's client for plain http:// hops (httptools); older versions and other checkouts: aiohttp
    import gymlab.http1 as _http1

    if not _http1.available():
        _http1 = None
except ImportError:
    _http1 = None


def bare_app(env_url: str = "", model_url: str = ""):
    """A raw ASGI callable: every POST parses its JSON body and answers JSON; ``/run`` (given the URLs)
    does a calculator episode's five hops first. ``GET /health`` answers ok."""
    state: dict[str, Any] = {}

    async def post(path: str, url: str, body: bytes) -> Any:
        if _http1 is not None:  # the client gymlab's own hops use, where this version has it
            answer = await _http1.post(url, path, body, {"Content-Type": "application/json"}, connect_timeout=30)
            return json.loads(answer.body)
        session = state.get("session")
        if session is None:
            import aiohttp

            session = state["session"] = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=0), cookie_jar=aiohttp.DummyCookieJar()
            )
        async with session.post(url + path, data=body, headers={"Content-Type": "application/json"}) as r:
            return json.loads(await r.read())

    async def episode(row: dict) -> dict:
        raw = json.dumps(row).encode()
        await post("/seed_session", env_url, raw)
        params = row.get("responses_create_params", {})
        first = await post("/v1/responses", model_url, json.dumps(params).encode())
        call = first["output"][0]
        tool = await post("/" + call["name"], env_url, call["arguments"].encode())
        convo = {**params, "input": [*first["output"], {"type": "function_call_output", "output": json.dumps(tool)}]}
        second = await post("/v1/responses", model_url, json.dumps(convo).encode())
        return await post("/verify", env_url, json.dumps({**row, "response": second}).encode())

    async def app(scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                else:
                    if state.get("session") is not None:
                        await state["session"].close()
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        chunks = []
        while True:
            message = await receive()
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        path = scope["path"]
        body = json.loads(b"".join(chunks) or b"{}")
        if path == "/run":
            answer: Any = await episode(body)
        elif path == "/square":
            answer = {"result": body["value"] ** 2}
        elif path == "/v1/responses":
            last = (body.get("input") or [{}])[-1]
            answer = _MESSAGE if isinstance(last, dict) and last.get("type") == "function_call_output" else _CALL
        elif path == "/verify":
            answer = {**body, "reward": 1.0}
        else:
            answer = {"status": "ok"} if path == "/health" else {}
        data = json.dumps(answer).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(data)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": data})

    return app


def stack_options() -> dict[str, Any]:
    """The uvicorn options gymlab's servers use here (uvicorn's ``auto`` in versions that name none)."""
    try:
        from gymlab._runtime.stack import uvicorn_options
    except ImportError:
        return {}
    return uvicorn_options()


def stack_used() -> str:
    """What uvicorn runs on in this process's environment."""
    opts = stack_options()
    if opts:
        return f"{opts['http']} + {opts['loop']}"
    try:
        import httptools  # noqa: F401

        http = "httptools"
    except ImportError:
        http = "h11"
    try:
        import uvloop  # noqa: F401

        loop = "uvloop"
    except ImportError:
        loop = "asyncio"
    return f"{http} + {loop} (uvicorn auto)"


def serve_bare(port: int, env_url: str, model_url: str) -> None:
    import uvicorn

    app = bare_app(env_url, model_url)
    try:  # what gymlab's own server processes do before serving, where this version does it
        from gymlab._runtime.stack import settle_heap
    except ImportError:
        pass
    else:
        settle_heap()
    options = {"host": "127.0.0.1", "port": port, "log_level": "warning", "access_log": False, "timeout_keep_alive": 30}
    uvicorn.Server(uvicorn.Config(app, **options, **stack_options())).run()


# -- CPU time ----------------------------------------------------------------------------------------

_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def proc_cpu(pids: list[int]) -> float:
    """Seconds of CPU (user + system, all threads) the processes have used."""
    total = 0.0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / _TICK
    return total


def self_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def children_of(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
            if ppid == pid:
                out.append(int(entry))
    return out


# -- the client --------------------------------------------------------------------------------------


async def _drive(url: str, path: str, bodies: list[Any], concurrency: int, check=None) -> float:
    """POST every body at ``concurrency``; seconds taken. ``check(answer)`` must hold for each."""
    import aiohttp

    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        cookie_jar=aiohttp.DummyCookieJar(),
        timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S),
    ) as session:
        queue = list(reversed(bodies))

        async def worker():
            while queue:
                body = queue.pop()
                async with session.post(url + path, json=body) as r:
                    answer = await r.read()
                    if r.status != 200:
                        raise RuntimeError(f"POST {path} answered {r.status}: {answer[:300]!r}")
                if check is not None and not check(json.loads(answer)):
                    raise RuntimeError(f"POST {path}: unexpected answer {answer[:300]!r}")

        t = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(min(concurrency, len(bodies)))))
        return time.perf_counter() - t


def _count(conc: int, base: int) -> int:
    """Episodes at one concurrency: ``base``, and at least two rounds of ``conc`` (one in a quick run)."""
    return max(base, conc * (2 if base >= 100 else 1))


def _rewarded(answer: Any) -> bool:
    return answer.get("reward") == 1.0


def _points(url: str, rows: list[dict], cpu, base: int) -> list[dict[str, Any]]:
    asyncio.run(_drive(url, "/run", rows[:8], 4, _rewarded))  # warm up connections and caches
    points = []
    for conc in CONCURRENCY:
        n = _count(conc, base)
        batch = [rows[i % len(rows)] for i in range(n)]
        c0 = cpu()
        wall = asyncio.run(_drive(url, "/run", batch, conc, _rewarded))
        points.append(
            {"concurrency": conc, "episodes": n, "episodes/s": n / wall, "cpu ms/episode": 1000 * (cpu() - c0) / n}
        )
    return points


def _hop(url: str, cpu, n: int, conc: int = 16) -> float:
    """Server CPU microseconds per ``POST /square``."""
    bodies = [{"value": i % 100} for i in range(n)]
    asyncio.run(_drive(url, "/square", bodies[:50], conc))
    c0 = cpu()
    asyncio.run(_drive(url, "/square", bodies, conc, lambda a: "result" in a))
    return 1e6 * (cpu() - c0) / n


# -- process layout ----------------------------------------------------------------------------------


def _wait_health(url: str, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    import urllib.request

    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url + "/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not come up (exit code {proc.poll()})")
        time.sleep(0.05)


def _stop(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@contextmanager
def _gymlab_serve(config: Path):
    """``python -m gymlab serve CONFIG``: yields (agent URL, calculator URL, server PIDs)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "gymlab", "serve", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=_same_gymlab_env(),
    )
    try:
        urls: dict[str, str] = {}
        for line in proc.stdout:
            found = re.match(r"(\S+) -> (http://[\w.-]+:\d+)", line.strip())  # the servers share this pipe
            if found:
                urls[found[1]] = found[2]
            if "all" in line and "servers are up" in line:
                break
        if proc.poll() is not None or len(urls) < 3:
            raise RuntimeError(f"gymlab serve did not start the calculator config (got {urls})")
        threading.Thread(target=proc.stdout.read, daemon=True).start()  # a full pipe would stall a server
        yield urls["calculator_simple_agent"], urls["calculator"], children_of(proc.pid)
    finally:
        _stop([proc])


def _same_gymlab_env() -> dict[str, str]:
    """This process's environment, with the ``gymlab`` it imported first on the path of its children."""
    import gymlab.examples

    root = str(Path(gymlab.examples.__file__).resolve().parent.parent)
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": os.pathsep.join([root, path]) if path else root}


def _free_ports(k: int) -> list[int]:
    import socket

    socks = [socket.socket() for _ in range(k)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


@contextmanager
def _bare_processes():
    """Three bare processes (environment, model, agent): yields (agent URL, environment URL, PIDs)."""
    env_port, model_port, agent_port = _free_ports(3)
    env_url, model_url = f"http://127.0.0.1:{env_port}", f"http://127.0.0.1:{model_port}"
    me = [sys.executable, os.path.abspath(__file__), "--serve-bare"]
    procs = [
        subprocess.Popen([*me, str(env_port)], env=_same_gymlab_env()),
        subprocess.Popen([*me, str(model_port)], env=_same_gymlab_env()),
        subprocess.Popen([*me, str(agent_port), "--env", env_url, "--model", model_url], env=_same_gymlab_env()),
    ]
    try:
        agent_url = f"http://127.0.0.1:{agent_port}"
        for url, p in zip((env_url, model_url, agent_url), procs):
            _wait_health(url, p)
        yield agent_url, env_url, [p.pid for p in procs]
    finally:
        _stop(procs)


def process_layout(base: int, hops: int) -> dict[str, Any]:
    from gymlab.examples import environment_dir, example_rows

    rows = example_rows("calculator")
    config = environment_dir("calculator") / "configs" / "calculator.yaml"
    with _gymlab_serve(config) as (agent, env, pids):
        gymlab = _points(agent, rows, lambda: proc_cpu(pids), base)
        hop = _hop(env, lambda: proc_cpu(pids), hops)
    with _bare_processes() as (agent, env, pids):
        bare = _points(agent, rows, lambda: proc_cpu(pids), base)
        bare_hop = _hop(env, lambda: proc_cpu(pids), hops)
    return {"gymlab": gymlab, "bare": bare, "hop us": {"gymlab": hop, "bare": bare_hop}}


# -- Lab layout --------------------------------------------------------------------------------------


def _lab_points(lab, agent, rows: list[dict], base: int) -> list[dict[str, Any]]:
    lab.run_many(agent, rows[:8], concurrency=4)
    points = []
    for conc in CONCURRENCY:
        n = _count(conc, base)
        batch = [rows[i % len(rows)] for i in range(n)]
        c0, t = self_cpu(), time.perf_counter()
        results = lab.run_many(agent, batch, concurrency=conc)
        wall, cpu = time.perf_counter() - t, self_cpu() - c0
        if len(results) != n or not all(r.reward == 1.0 for r in results):
            raise RuntimeError("a Lab benchmark episode was not rewarded 1.0")
        points.append({"concurrency": conc, "episodes": n, "episodes/s": n / wall, "cpu ms/episode": 1000 * cpu / n})
    return points


def lab_layout(base: int) -> dict[str, Any]:
    from gymlab._runtime.serve import ThreadedServer
    from gymlab.examples import example_rows, load_environment
    from gymlab.lab import Lab

    rows = example_rows("calculator")
    calc = load_environment("calculator")
    with Lab() as lab:
        env = lab.serve(calc.CalculatorServer)
        model = lab.serve_model(calc.policy)
        agent = lab.serve_agent("simple_agent", resources=env, model=model)
        gymlab = _lab_points(lab, agent, rows, base)
    servers = [
        ThreadedServer(bare_app(), name="bare-env").start(),
        ThreadedServer(bare_app(), name="bare-model").start(),
    ]
    servers.append(ThreadedServer(bare_app(servers[0].url, servers[1].url), name="bare-agent").start())
    try:
        bare = _points(servers[2].url, rows, self_cpu, base)
    finally:
        for s in servers:
            s.stop()
    return {"gymlab": gymlab, "bare": bare}


def measure(sections: list[str], quick: bool) -> dict[str, Any]:
    base, hops = (
        (20, 500) if quick else (2000, 4000)
    )  # 2,000 episodes a point: shorter runs moved CPU per episode by a third
    out: dict[str, Any] = {"stack": stack_used(), "python": sys.version.split()[0]}
    if "process" in sections:
        out["process"] = process_layout(base, hops)
    if "lab" in sections:
        out["lab"] = lab_layout(base)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--serve-bare", type=int, metavar="PORT")
    p.add_argument("--env", default="")
    p.add_argument("--model", default="")
    p.add_argument("--sections", nargs="*", default=["process", "lab"])
    p.add_argument("--quick", action="store_true")
    p.add_argument("--json", metavar="PATH")
    args = p.parse_args(argv)
    if args.serve_bare:
        serve_bare(args.serve_bare, args.env, args.model)
        return 0
    figures = measure(args.sections, args.quick)
    text = json.dumps(figures, indent=2)
    if args.json:
        Path(args.json).write_text(text)
    else:
        print(text)
    return 0


if __name__ == "__main__":
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        sys.path.pop(0)  # run by path: ``gymlab`` comes from PYTHONPATH, not from this folder's siblings
    raise SystemExit(main())
