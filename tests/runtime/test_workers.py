"""Several uvicorn workers per server, with session ownership routing: real worker processes on loopback.

Each server runs as its own process group (``python app.py`` with ``num_workers`` in the config env
var), bound to port 0, and is stopped in ``finally`` by signalling the whole group.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from gymlab import ConfigError, SimpleResourcesServer
from gymlab._runtime.ownership import FORWARDED_HEADER, WORKER_HEADER, SessionOwnershipMiddleware
from gymlab._runtime.workers import check_workers
from gymlab._sync import run_sync
from gymlab.examples import environment_dir, example_rows
from gymlab.testing.workers import serve_entrypoint

WORKERS = 4
#: How long to wait for something that happens on its own (a worker starting, every worker being
#: reached): generous, because CI runs these on a loaded 2-core machine. Passing tests never wait it out.
DEADLINE_S = 120.0
COUNTER = environment_dir("counter") / "app.py"
STATELESS = environment_dir("stateless") / "app.py"


@contextlib.contextmanager
def served(entrypoint: Path, workers: int = WORKERS, **config: Any):
    """``python entrypoint`` with ``num_workers``; yields (url, process); every worker accepting before
    the test starts, so connections spread over all of them; the process group stopped after."""
    with serve_entrypoint(entrypoint, workers, **config) as server:
        yield server.url, server.process


class Client:
    """One episode's cookie jar; every request on a new connection, so it lands on any worker."""

    def __init__(self, url: str):
        self.url, self.jar = url, {}

    async def post(self, path: str, body: dict) -> tuple[int, dict, dict]:
        headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in self.jar.items())} if self.jar else {}
        connector = aiohttp.TCPConnector(force_close=True)
        async with aiohttp.ClientSession(connector=connector, cookie_jar=aiohttp.DummyCookieJar()) as s:
            async with s.post(self.url + path, json=body, headers=headers) as r:
                data = await r.json(content_type=None)
                for key, morsel in r.cookies.items():
                    self.jar[key] = morsel.value
                return r.status, data, dict(r.headers)


def _verify_body(target: int) -> dict:
    return {"responses_create_params": {"input": "count"}, "response": {"output": []}, "target": target}


async def _counter_episode(url: str, start: int, increments: int) -> dict:
    c = Client(url)
    owners, receivers, statuses = set(), set(), []
    for path, body in [
        ("/seed_session", {"initial_count": start}),
        *[("/increment", {"by": 1})] * increments,
        ("/verify", _verify_body(start + increments)),
    ]:
        status, data, headers = await c.post(path, body)
        statuses.append(status)
        owners.add(headers.get(WORKER_HEADER.decode()))
        receivers.add(headers.get(FORWARDED_HEADER.decode(), headers.get(WORKER_HEADER.decode())))
    return {"reward": data.get("reward"), "owners": owners, "receivers": receivers, "statuses": statuses}


def _wait_until(predicate, timeout: float = DEADLINE_S) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"condition not reached within {timeout:g} s"
        time.sleep(0.05)


def _process_gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def _held_connections_to_dead_workers(port: int) -> list[int]:
    """Local ports of this process's TCP connections to ``port`` whose server end was closed by a process exit.

    A killed worker's sockets are orphaned at once (inode 0 in /proc/net/tcp, FIN_WAIT1/2 or CLOSING);
    the client end stays open in this process until its event loop reads the FIN and closes it.
    """
    rows = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(FileNotFoundError), open(table) as f:
            for line in f.read().splitlines()[1:]:
                fields = line.split()
                local, remote = (int(a.rsplit(":", 1)[1], 16) for a in fields[1:3])
                rows.append((local, remote, fields[3], int(fields[9])))
    orphaned_peers = {
        remote for local, remote, state, inode in rows if local == port and inode == 0 and state in ("04", "05", "0B")
    }
    mine = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith("socket:["):
                mine.add(int(target[8:-1]))
    return [local for local, remote, _, inode in rows if remote == port and local in orphaned_peers and inode in mine]


# -- routing is what makes a stateful server correct with several workers -------------------------


def _unrouted_counter(tmp_path: Path) -> Path:
    path = tmp_path / "unrouted_counter.py"
    path.write_text(
        "from gymlab.examples import load_environment\n"
        "from gymlab.utils import is_gymlab_fastapi_entrypoint\n\n"
        "class UnroutedCounter(load_environment('counter').CounterServer):\n"
        "    routes_sessions_to_owner = False\n\n"
        "if __name__ == '__main__':\n"
        "    UnroutedCounter.run_webserver()\n"
        "elif is_gymlab_fastapi_entrypoint(__file__):\n"
        "    app = UnroutedCounter.run_webserver()\n"
    )
    return path


def _rollouts(lab, counter, url: str, n: int) -> list[Any]:
    model = lab.serve_model(counter.policy)
    agent = lab.serve_agent("simple_agent", resources=url, model=model, max_steps=12)
    rows = example_rows("counter")
    batch = [rows[i % len(rows)] for i in range(n)]

    async def all_of():
        return await asyncio.gather(*(agent.arun(r) for r in batch), return_exceptions=True)

    return run_sync(all_of())


def _graded(r: Any) -> bool:
    return not isinstance(r, BaseException) and r.reward == 1.0 and not r.mask_sample


def test_400_concurrent_counter_rollouts_on_4_workers_all_graded(lab, counter):
    with served(COUNTER) as (url, _):
        results = _rollouts(lab, counter, url, 400)
    failed = [r for r in results if not _graded(r)]
    assert not failed, f"{len(failed)} of 400 misgraded, first: {failed[0]!r}"


def test_the_same_rollouts_fail_without_routing(lab, counter, tmp_path):
    with served(_unrouted_counter(tmp_path)) as (url, _):
        results = _rollouts(lab, counter, url, 400)
    failed = [r for r in results if not _graded(r)]
    assert failed, "every rollout graded without routing: the workers did not split the sessions"


def _spread(episodes: list[dict]) -> bool:
    """Sessions owned by more than one worker, and some request forwarded to its owner."""
    return len({o for e in episodes for o in e["owners"]}) > 1 and any(len(e["receivers"]) > 1 for e in episodes)


async def _episodes_until_spread(url: str, batch: int, increments: int) -> list[dict]:
    """Batches of concurrent counter episodes until ``_spread`` holds. On a busy machine one worker
    can accept a whole burst of connections, so a single batch may all land on it."""
    episodes: list[dict] = []
    deadline = time.monotonic() + DEADLINE_S
    while not _spread(episodes):
        assert time.monotonic() < deadline, (
            f"every session stayed on workers {sorted({o for e in episodes for o in e['owners']})}"
        )
        episodes += await asyncio.gather(*(_counter_episode(url, i, increments) for i in range(batch)))
    return episodes


def test_every_request_of_a_session_runs_in_its_owner():
    with served(COUNTER) as (url, _):
        episodes = run_sync(_episodes_until_spread(url, 40, 3))
    assert all(e["reward"] == 1.0 and e["statuses"] == [200] * 5 for e in episodes)
    assert all(len(e["owners"]) == 1 for e in episodes)  # one worker answered all five requests
    assert len({o for e in episodes for o in e["owners"]}) > 1  # sessions spread over workers
    assert any(len(e["receivers"]) > 1 for e in episodes)  # and requests arrived elsewhere: forwarded


# -- a dead owner ----------------------------------------------------------------------------------


def test_killed_owner_gives_410_and_other_sessions_carry_on():
    async def run(url):
        clients = [Client(url) for _ in range(16)]
        seeds = await asyncio.gather(*(c.post("/seed_session", {"initial_count": 0}) for c in clients))
        owner = {id(c): s[2][WORKER_HEADER.decode()] for c, s in zip(clients, seeds)}
        deadline = time.monotonic() + DEADLINE_S
        while len(set(owner.values())) < 2:  # one worker can accept a whole burst: seed until one is elsewhere
            assert time.monotonic() < deadline, f"every session landed on worker {set(owner.values())}"
            c = Client(url)
            owner[id(c)] = (await c.post("/seed_session", {"initial_count": 0}))[2][WORKER_HEADER.decode()]
            clients.append(c)
        victim = owner[id(clients[0])]
        os.kill(int(victim), signal.SIGKILL)
        _wait_until(lambda: _process_gone(int(victim)))
        lost = [c for c in clients if owner[id(c)] == victim]
        kept = [c for c in clients if owner[id(c)] != victim]
        lost_answers = [await c.post("/increment", {"by": 1}) for c in lost]
        kept_answers = [await c.post("/increment", {"by": 1}) for c in kept]
        verified = [await c.post("/verify", _verify_body(1)) for c in kept]
        return victim, lost_answers, kept_answers, verified

    with served(COUNTER) as (url, _):
        victim, lost, kept, verified = run_sync(run(url))
    assert lost and all(status == 410 for status, _, _ in lost)
    status, body, _ = lost[0]
    assert body["server"] == "counter_server" and body["route"] == "POST /increment"
    assert body["session_id"] and f"worker {victim}" in body["message"] and "no longer running" in body["message"]
    assert kept, "every session landed on the killed worker"
    assert all(status == 200 and body["count"] == 1 for status, body, _ in kept)
    assert all(body["reward"] == 1.0 and not body["mask_sample"] for _, body, _ in verified)


def _whoami_counter(tmp_path: Path) -> Path:
    path = tmp_path / "whoami_counter.py"
    path.write_text(
        "import os\n"
        "from fastapi import Request\n"
        "from gymlab.examples import load_environment\n"
        "from gymlab.utils import is_gymlab_fastapi_entrypoint\n\n"
        "class WhoamiCounter(load_environment('counter').CounterServer):\n"
        "    def setup_webserver(self):\n"
        "        app = super().setup_webserver()\n"
        "        app.post('/whoami')(self.whoami)\n"
        "        return app\n\n"
        "    async def whoami(self, request: Request) -> dict:\n"
        "        return {'pid': os.getpid()}\n\n"
        "if __name__ == '__main__':\n"
        "    WhoamiCounter.run_webserver()\n"
        "elif is_gymlab_fastapi_entrypoint(__file__):\n"
        "    app = WhoamiCounter.run_webserver()\n"
    )
    return path


def test_rollout_whose_worker_dies_mid_episode_comes_back_masked(lab, counter, tmp_path):
    from gymlab import function_call

    killed = []

    def policy(request):
        outputs = [i for i in request.input_items() if i.type == "function_call_output"]
        if not outputs:
            return [function_call("whoami", {})]
        if len(outputs) == 1:  # the session's owner answered whoami: kill it mid-episode
            pid = json.loads(outputs[0].output)["pid"]
            os.kill(pid, signal.SIGKILL)
            _wait_until(lambda: _process_gone(pid))
            # the agent's pooled connections to the dead worker: wait until its loop has seen them close
            # (else it could send the next call down one and get a disconnect instead of the 410)
            _wait_until(lambda: not _held_connections_to_dead_workers(port))
            killed.append(pid)
        return [function_call("increment", {"by": 1})]

    with served(_whoami_counter(tmp_path)) as (url, _):
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        model = lab.serve_model(policy)
        agent = lab.serve_agent("simple_agent", resources=url, model=model, max_steps=6)
        row = example_rows("counter")[0]
        row["responses_create_params"]["tools"].append({"type": "function", "name": "whoami", "parameters": {}})
        rollout = agent.run(row)  # whoami is declared: the agent dispatches only declared tools
        after = lab.serve_agent(
            "simple_agent", name="after", resources=url, model=lab.serve_model(counter.policy, name="counter_policy")
        )
        others = [after.run(r) for r in example_rows("counter")]
    assert killed
    assert rollout.mask_sample and rollout.failure_kind == "session_lost"
    assert "410" in rollout.failure_reason and "no longer running" in rollout.failure_reason
    assert all(r.reward == 1.0 and not r.mask_sample for r in others)


# -- episode sessions: fences and conflicts agree on every worker -----------------------------------


def _episode_seed(sid: str) -> dict:
    return {
        "resources_session_id": sid,
        "episode_id": {"rollout_id": sid, "attempt": 0},
        "task_data": {"initial_count": 0, "target": 1},
    }


async def _from_every_worker(url: str, path: str, body: dict, workers: int = WORKERS, timeout: float = DEADLINE_S):
    """Send ``body`` on fresh connections, one after another, until every worker has received it; the answers.

    Which worker accepts a connection is up to the kernel and the scheduler: on an idle machine a few
    dozen requests reach all four, on a loaded one a worker can go unscheduled for a long while (80
    requests once reached only 3 of 4), so this waits on the condition, not a count of requests.
    """
    answers, receivers = [], set()
    deadline = time.monotonic() + timeout
    while len(receivers) < workers:
        assert time.monotonic() < deadline, (
            f"{len(answers)} requests in {timeout:g} s reached only workers {sorted(receivers)} of {workers}"
        )
        status, data, headers = await Client(url).post(path, body)
        answers.append((status, data, headers.get(WORKER_HEADER.decode())))
        receivers.add(headers.get(FORWARDED_HEADER.decode(), headers.get(WORKER_HEADER.decode())))
    return answers, receivers


def test_late_seed_after_close_is_refused_on_every_worker():
    async def run(url):
        closer = Client(url)
        assert (await closer.post("/seed_session", _episode_seed("rs-1")))[0] == 200
        assert (await closer.post("/close_session", {"resources_session_id": "rs-1"}))[0] == 200
        late = await _from_every_worker(url, "/seed_session", _episode_seed("rs-1"))
        # the close of an ID nobody seeded fences it too, on the worker that saw it
        assert (await Client(url).post("/close_session", {"resources_session_id": "rs-2"}))[0] == 200
        never = await _from_every_worker(url, "/seed_session", _episode_seed("rs-2"))
        return late, never

    with served(COUNTER) as (url, _):
        for answers, receivers in run_sync(run(url)):
            assert len(receivers) == WORKERS
            assert all(status == 409 for status, _, _ in answers), answers
            assert len({owner for _, _, owner in answers}) == 1  # one worker gave every answer


def test_cookie_and_body_naming_different_sessions_get_409():
    async def run(url):
        c = Client(url)
        assert (await c.post("/seed_session", _episode_seed("rs-a")))[0] == 200
        return await c.post("/close_session", {"resources_session_id": "rs-b"}), await c.post(
            "/seed_session", _episode_seed("rs-b")
        )

    with served(COUNTER) as (url, _):
        answers = run_sync(run(url))
    for status, body, _ in answers:
        assert status == 409
        assert "rs-a" in body["message"] and "rs-b" in body["message"] and body["server"] == "counter_server"


def test_a_seed_naming_another_clients_session_is_refused_on_every_worker():
    """The victim's session ID is readable in its cookie; an attacker's seed naming it, from whichever
    worker receives it, is refused 409 with no cookie, and the victim's episode scores as its own."""

    async def run(url):
        victim = Client(url)
        assert (await victim.post("/seed_session", {"initial_count": 0}))[0] == 200
        (cookie,) = victim.jar.values()
        sid = json.loads(base64.b64decode(cookie.strip('"').split(".")[0]))["session_id"]
        assert (await victim.post("/increment", {"by": 1}))[0] == 200
        hijack = {**_episode_seed(sid), "task_data": {"initial_count": 5}}
        refused = await _from_every_worker(url, "/seed_session", hijack)
        status, verified, _ = await victim.post("/verify", _verify_body(1))
        return refused, status, verified

    with served(COUNTER) as (url, _):
        (answers, receivers), status, verified = run_sync(run(url))
    assert len(receivers) == WORKERS
    assert all(status == 409 for status, _, _ in answers), answers
    assert status == 200 and verified["reward"] == 1.0 and verified["final_count"] == 1


# -- opting out, refusing, and one worker --------------------------------------------------------


def test_stateless_server_opted_out_serves_with_4_workers(lab):
    from gymlab.examples import load_environment

    stateless = load_environment("stateless")

    async def direct(url):
        return await asyncio.gather(*(Client(url).post("/reverse", {"text": f"w{i}"}) for i in range(40)))

    with served(STATELESS) as (url, _):
        answers = run_sync(direct(url))
        agent = lab.serve_agent("simple_agent", resources=url, model=lab.serve_model(stateless.policy))
        rollouts = [agent.run(r) for r in example_rows("stateless") * 4]
    assert [body["result"] for _, body, _ in answers] == [f"w{i}"[::-1] for i in range(40)]
    assert all(WORKER_HEADER.decode() not in headers for _, _, headers in answers)  # no routing layer
    assert all(r.reward == 1.0 for r in rollouts)


class _RegistryServer(SimpleResourcesServer):
    async def verify(self, body):  # pragma: no cover - never served
        raise NotImplementedError

    def multiple_workers_unsupported_reason(self) -> str | None:
        return "its registry is keyed by job_id in the body, which routing cannot see"


def test_unsupported_server_refuses_several_workers_before_uvicorn_starts():
    assert check_workers(_RegistryServer, 1) is None
    reason = check_workers(_RegistryServer, 4)
    assert "job_id" in reason and "num_workers: 1" in reason
    with pytest.raises(ConfigError, match="job_id"):
        _RegistryServer(num_workers=4, port=0).run_webserver()


def test_entrypoint_without_the_worker_block_is_reported(tmp_path):
    path = tmp_path / "plain.py"
    path.write_text(
        "from gymlab.examples import load_environment\n"
        "class Plain(load_environment('counter').CounterServer):\n    pass\n"
    )
    import importlib.util

    spec = importlib.util.spec_from_file_location("plain_entrypoint", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["plain_entrypoint"] = module
    try:
        spec.loader.exec_module(module)
        assert "is_gymlab_fastapi_entrypoint(__file__)" in check_workers(module.Plain, 2)
        assert check_workers(load_counter_class(), 2) is None
    finally:
        del sys.modules["plain_entrypoint"]


def load_counter_class():
    from gymlab.examples import load_environment

    return load_environment("counter").CounterServer


def test_one_worker_has_no_routing_layer(counter):
    app = counter.CounterServer().app
    assert all(m.cls is not SessionOwnershipMiddleware for m in app.user_middleware)


# -- gymlab serve ------------------------------------------------------------------------------------


def _config(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "workers.yaml"
    path.write_text(
        f"counter:\n  resources_servers:\n    counter:\n      entrypoint: {COUNTER}\n      num_workers: 4\n" + extra
    )
    return path


def test_serve_dry_run_reports_a_server_that_needs_one_worker(tmp_path):
    registry = tmp_path / "registry.py"
    registry.write_text(
        "from gymlab import SimpleResourcesServer\n\n"
        "class Registry(SimpleResourcesServer):\n"
        "    async def verify(self, body):\n        raise NotImplementedError\n\n"
        "    def multiple_workers_unsupported_reason(self):\n"
        "        return 'its jobs are keyed by job_id in the body'\n"
    )
    ok = subprocess.run(
        [sys.executable, "-m", "gymlab.cli", "serve", "--dry-run", str(_config(tmp_path))],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert ok.returncode == 0, ok.stderr
    extra = f"registry:\n  resources_servers:\n    registry:\n      entrypoint: {registry}\n      num_workers: 2\n"
    refused = subprocess.run(
        [sys.executable, "-m", "gymlab.cli", "serve", "--dry-run", str(_config(tmp_path, extra))],
        capture_output=True,
        text=True,
        timeout=DEADLINE_S,
    )
    assert refused.returncode == 2
    assert "registry" in refused.stderr and "keyed by job_id" in refused.stderr and "num_workers: 1" in refused.stderr


def test_gymlab_serve_runs_a_config_with_4_workers(tmp_path):
    proc = subprocess.Popen(
        [sys.executable, "-m", "gymlab.cli", "serve", str(_config(tmp_path))],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        url = None
        deadline = time.monotonic() + DEADLINE_S
        while url is None and time.monotonic() < deadline:
            ready, _, _ = select.select([proc.stdout], [], [], 1)
            line = proc.stdout.readline() if ready else ""
            if line.startswith("counter -> "):
                url = line.split(" -> ", 1)[1].strip()
        assert url, "gymlab serve did not report the counter's URL"

        async def run():
            seen = set()  # /health answered once one worker was up: wait for all four
            deadline = time.monotonic() + DEADLINE_S
            while len(seen) < WORKERS:
                assert time.monotonic() < deadline, f"only workers {sorted(seen)} answered within {DEADLINE_S:g} s"
                seen.add((await Client(url).post("/increment", {"by": 1}))[2][WORKER_HEADER.decode()])
                await asyncio.sleep(0.05)  # a poll interval while the other workers start
            return await _episodes_until_spread(url, 24, 2)

        episodes = run_sync(run())
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(5)
    assert all(e["reward"] == 1.0 and len(e["owners"]) == 1 for e in episodes)
    assert len({o for e in episodes for o in e["owners"]}) > 1


@contextlib.asynccontextmanager
async def _connection_elsewhere(url: str, not_worker: str, probe: tuple[str, dict] = ("/increment", {"by": 1})):
    """An aiohttp session whose one keep-alive connection was accepted by a worker other than ``not_worker``."""
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:  # which worker accepts is the scheduler's choice: a deadline, not a count
        s = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1), cookie_jar=aiohttp.DummyCookieJar())
        async with s.post(url + probe[0], json=probe[1]) as r:  # a new session: answered where it lands
            here = r.headers[WORKER_HEADER.decode()]
            await r.read()  # read to the end, or the connection is not kept for the next request
        if here != not_worker:
            try:
                yield s
            finally:
                await s.close()
            return
        await s.close()
    raise AssertionError(f"no connection reached a worker other than {not_worker} within {DEADLINE_S:g} s")


# -- how long ownership lasts ------------------------------------------------------------------------


def test_ownership_outlives_a_verify_that_says_a_close_follows_and_expires_after_a_close():
    window = 1.0

    async def run(url):
        held, closed = Client(url), Client(url)
        for c, sid in ((held, "rs-held"), (closed, "rs-closed")):
            assert (await c.post("/seed_session", _episode_seed(sid)))[0] == 200
        _, _, h = await held.post("/verify", {**_verify_body(0), "close_follows": True})
        owner = h[WORKER_HEADER.decode()]
        assert (await closed.post("/close_session", {"resources_session_id": "rs-closed"}))[0] == 200
        # the behaviour under test: time passes beyond the window (expiry is checked against the clock
        # when a request arrives, so a slow machine only makes it more certain); only the closed
        # session's ownership ends
        await asyncio.sleep(2 * window)
        async with _connection_elsewhere(url, owner) as s:  # first arrival at another worker: forwarded
            cookie = "; ".join(f"{k}={v}" for k, v in held.jar.items())
            async with s.post(url + "/increment", json={"by": 1}, headers={"Cookie": cookie}) as r:
                assert r.headers[WORKER_HEADER.decode()] == owner  # (its counter went with the verify: 404)
                assert FORWARDED_HEADER.decode() in r.headers
        close = await held.post("/close_session", {"resources_session_id": "rs-held"})
        status, _, headers = await Client(url).post("/seed_session", _episode_seed("rs-closed"))
        return owner, close, status, headers

    with served(COUNTER, session_close_retry_window_seconds=window) as (url, _):
        owner, close, status, headers = run_sync(run(url))
    assert close[0] == 200 and close[2][WORKER_HEADER.decode()] == owner  # the close that followed, at its owner
    # the fence and the ownership have both expired: the seed opens the session where it arrived
    assert status == 200 and FORWARDED_HEADER.decode() not in headers


# -- the Gymnasium protocol --------------------------------------------------------------------------


def test_blackjack_on_4_workers_plays_as_in_one_process(lab, tmp_path):
    from gymlab.examples import load_environment

    blackjack = load_environment("blackjack")
    path = tmp_path / "blackjack_workers.py"
    path.write_text(
        "from gymlab.examples import load_environment\n"
        "from gymlab.utils import is_gymlab_fastapi_entrypoint\n\n"
        "class Blackjack(load_environment('blackjack').BlackjackEnv):\n    pass\n\n"
        "if __name__ == '__main__':\n    Blackjack.run_webserver()\n"
        "elif is_gymlab_fastapi_entrypoint(__file__):\n    app = Blackjack.run_webserver()\n"
    )
    rows = example_rows("blackjack") * 8
    model = lab.serve_model(blackjack.policy)
    local = lab.serve_agent("gymnasium_agent", name="local", resources=lab.serve(blackjack.BlackjackEnv), model=model)
    expected = [r.reward for r in lab.run_many(local, rows, concurrency=len(rows), on_error="raise")]
    with served(path) as (url, _):
        agent = lab.serve_agent("gymnasium_agent", resources=url, model=model)
        rollouts = lab.run_many(agent, rows, concurrency=len(rows), on_error="raise")
    assert [r.reward for r in rollouts] == expected
    assert not any(r.mask_sample for r in rollouts)


STEPPER = """
from gymlab import GymnasiumServer
from gymlab.utils import is_gymlab_fastapi_entrypoint


class Stepper(GymnasiumServer):
    async def reset(self, metadata, session_id=None):
        self.session_state[session_id] = 0
        return "start", {}

    async def step(self, action, metadata, session_id=None):
        self.session_state[session_id] += 1
        n = self.session_state[session_id]
        # what the policy wrote, echoed in info: the answer's bytes say terminated, the episode goes on
        return action.output_text or "", 0.0, n >= 3, False, {"terminated": True, "truncated": True}


if __name__ == "__main__":
    Stepper.run_webserver()
elif is_gymlab_fastapi_entrypoint(__file__):
    app = Stepper.run_webserver()
"""


def test_a_gymnasium_session_ends_its_ownership_when_the_server_ends_it_not_when_its_bytes_say_so(tmp_path):
    window = 1.0
    path = tmp_path / "stepper.py"
    path.write_text(STEPPER)
    said = '{"terminated":true,"truncated":true}'  # a degenerate policy's text, as an observation
    row = {"responses_create_params": {"input": "play"}}
    step = {
        **row,
        "response": {
            "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": said}]}]
        },
    }
    reset = ("/reset", row)

    async def run(url):
        episode = Client(url)
        _, _, h = await episode.post(*reset)
        owner = h[WORKER_HEADER.decode()]
        status, first, _ = await episode.post("/step", step)
        assert status == 200 and first["observation"] == said and not first["terminated"]
        await asyncio.sleep(2 * window)  # time passes beyond the window: an ended session's ownership would expire
        cookie = {"Cookie": "; ".join(f"{k}={v}" for k, v in episode.jar.items())}
        async with _connection_elsewhere(url, owner, reset) as s:
            async with s.post(url + "/step", json=step, headers=cookie) as r:
                going = (r.status, r.headers.get(WORKER_HEADER.decode()), FORWARDED_HEADER.decode() in r.headers)
                second = await r.json()
            async with s.post(url + "/step", json=step, headers=cookie) as r:
                last = await r.json()
        await asyncio.sleep(2 * window)  # the episode ended: its ownership expires after the window
        async with _connection_elsewhere(url, owner, reset) as s:
            async with s.post(url + "/step", json=step, headers=cookie) as r:
                after = (r.headers.get(WORKER_HEADER.decode()), FORWARDED_HEADER.decode() in r.headers)
                await r.read()
        return owner, going, second, last, after

    with served(path, workers=2, session_close_retry_window_seconds=window) as (url, _):
        owner, going, second, last, after = run_sync(run(url))
    assert going == (200, owner, True) and second["observation"] == said  # still its owner's: state kept
    assert last["terminated"]  # the third step ends the episode, and the server says so
    assert after[0] != owner and not after[1]  # nobody owns it now: answered where it arrived


def test_sessionless_requests_take_no_ownership_and_entrypoints_build_no_app_outside_a_worker(counter):
    from gymlab import is_gymlab_fastapi_entrypoint

    assert not is_gymlab_fastapi_entrypoint(str(COUNTER)) and not hasattr(counter, "app")

    async def run(url):
        c = Client(url)
        await c.post("/seed_session", {"initial_count": 0})
        metrics = await c.post("/aggregate_metrics", {"verify_responses": [{"reward": 1.0}]})
        async with aiohttp.ClientSession() as s:
            async with s.get(url + "/health", headers={"Cookie": "; ".join(f"{k}={v}" for k, v in c.jar.items())}) as r:
                health = (r.status, await r.json(), dict(r.headers))
        return metrics, health

    with served(COUNTER) as (url, _):
        (status, body, headers), (health_status, _, health_headers) = run_sync(run(url))
    assert status == 200 and body["agent_metrics"]["mean/reward"] == 1.0 and health_status == 200
    for h in (headers, health_headers):  # answered where they landed, untouched by the routing layer
        assert WORKER_HEADER.decode() not in h and FORWARDED_HEADER.decode() not in h and "Set-Cookie" not in h


def test_a_failed_seed_and_an_unseeded_close_are_owned_by_the_worker_that_saw_them():
    bad = {**_episode_seed("rs-bad"), "task_data": {"initial_count": "many"}}

    async def run(url):
        return (
            await _from_every_worker(url, "/seed_session", bad),
            await _from_every_worker(url, "/close_session", {"resources_session_id": "rs-unseeded"}),
        )

    with served(COUNTER) as (url, _):
        (seeds, seed_receivers), (closes, close_receivers) = run_sync(run(url))
    assert len(seed_receivers) == len(close_receivers) == WORKERS
    assert {s for s, _, _ in seeds} == {422} and len({o for _, _, o in seeds}) == 1
    assert {s for s, _, _ in closes} == {200} and len({o for _, _, o in closes}) == 1
