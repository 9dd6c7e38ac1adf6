"""The replica seam: a replica that is not an HTTP URL plugs into collection; a gone replica's rollouts
move to another, a gone last replica fails its rollouts with a typed kind, and a replica that comes
back re-enters rotation. Every rollout still runs on a real agent server."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gymlab.collection import HttpReplica, Replica, ReplicaPool, acollect, collect
from gymlab.errors import ConfigError, ReplicaGone
from gymlab.examples import example_rows
from gymlab.run.pool import agent_pool


class Dies:
    """A replica (as a Ray cell would be) that runs ``lives`` rollouts on ``inner``, then is gone;
    ``back`` says whether a probe finds it again (and revives it for ``lives`` more)."""

    def __init__(self, inner: HttpReplica, lives: int, back: bool = False):
        self.inner, self.lives, self.back = inner, lives, back
        self.name = f"cell-{inner.name}"
        self.runs = self.gone = 0

    async def run(self, job: dict, timeout_s: float | None) -> dict:
        if self.runs >= self.lives:
            self.gone += 1
            raise ReplicaGone(self.name, "the actor died")
        self.runs += 1
        return await self.inner.run(job, timeout_s)

    async def alive(self) -> bool:
        if self.back:
            self.runs, self.back = 0, False
            return True
        return False


@pytest.fixture
def agent(lab, calculator):
    env = lab.serve(calculator.CalculatorServer, name="calculator")
    model = lab.serve_model(calculator.policy)
    return lab.serve_agent("simple_agent", resources=env, model=model, name="calculator_simple_agent")


def lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_a_plugged_in_replica_that_dies_hands_its_rollouts_over(agent, tmp_path):
    cell = Dies(HttpReplica(agent.url), lives=2)
    assert isinstance(cell, Replica)
    pool = ReplicaPool([HttpReplica(agent.url, "host-a"), cell], reprobe_s=None)
    run = collect(example_rows("calculator"), tmp_path / "run.jsonl", agent_url=pool, repeats=2, progress=False)
    assert cell.runs == 2 and cell.gone >= 1 and pool.live == [pool.replicas[0]]
    assert run.failures == [] and [(r["_ng_task_index"], r["_ng_rollout_index"]) for r in lines(run.output)] == [
        (t, k) for t in range(5) for k in range(2)
    ]
    assert "1/2 live" in repr(pool) and "cell-" in repr(pool)


def test_the_last_replica_gone_fails_its_rollouts_with_a_typed_kind(agent, tmp_path):
    cell = Dies(HttpReplica(agent.url), lives=1)
    run = collect(
        example_rows("calculator")[:2],
        tmp_path / "run.jsonl",
        agent_url=ReplicaPool([cell]),
        max_retries=1,
        backoff_s=0.01,
        retry_span_s=2.0,
        progress=False,
    )
    assert len(run.rollouts) == 1 and len(run.failures) == 1  # never taken out: it is the only one
    failure = run.failures[0]
    assert (failure["failure_kind"], failure["failure_server"]) == ("transport_peer_drop", cell.name)
    assert failure["attempts"] > 2  # retried on while its failures spanned under 2 s


def test_a_replica_that_comes_back_re_enters_rotation(agent, tmp_path):
    cell = Dies(HttpReplica(agent.url), lives=1, back=True)
    pool = ReplicaPool([HttpReplica(agent.url, "host-a"), cell], reprobe_s=0.0)
    rows = example_rows("calculator")
    run = collect(rows, tmp_path / "run.jsonl", agent_url=pool, repeats=4, concurrency=2, progress=False)
    assert len(run.rollouts) == 20 and run.failures == []
    assert cell.runs >= 1 and cell.back is False  # probed, found back, and given rollouts again
    assert pool.started()[cell.name] >= 3


async def test_an_unreachable_url_names_the_agent_as_before(tmp_path):
    rows = example_rows("calculator")[:1]
    run = await acollect(
        rows, tmp_path / "a.jsonl", agent_url="http://127.0.0.1:9", agent="gone", max_retries=0, progress=False
    )
    [failure] = run.failures
    assert (failure["failure_server"], failure["failure_kind"], failure["failure_stage"]) == (
        "gone",
        "transport_unreachable",
        "admission",
    )
    assert "http://127.0.0.1:9" in failure["failure_reason"]


def test_agent_url_forms():
    assert [r.url for r in agent_pool(["http://h1:1", "http://h2:2/"]).replicas] == ["http://h1:1", "http://h2:2"]
    assert agent_pool("http://h1:1").name == "http://h1:1"
    with pytest.raises(ConfigError, match="given twice"):
        agent_pool(["http://h1:1", "http://h1:1"])
    with pytest.raises(ConfigError, match="a list of URLs"):
        agent_pool([])
    with pytest.raises(ConfigError, match="at least one replica"):
        ReplicaPool([])


class DropsOnce:
    """A replica whose server still answers but whose ``drops``-th rollouts lost their connection
    (a reset on one keep-alive connection): ``alive`` is the real server's answer."""

    def __init__(self, inner: HttpReplica, drops: set[int]):
        self.inner, self.drops = inner, drops
        self.name = f"flaky-{inner.name}"
        self.calls = 0

    async def run(self, job: dict, timeout_s: float | None) -> dict:
        self.calls += 1
        if self.calls in self.drops:
            raise ReplicaGone(self.name, "connection reset by peer")
        return await self.inner.run(job, timeout_s)

    async def alive(self) -> bool:
        return await self.inner.alive()


def test_one_dropped_connection_does_not_keep_a_live_replica_out(agent, tmp_path):
    flaky = DropsOnce(HttpReplica(agent.url), drops={2})
    pool = ReplicaPool([HttpReplica(agent.url, "host-a"), flaky], reprobe_s=3600)
    rows = example_rows("calculator")
    run = collect(rows, tmp_path / "a.jsonl", agent_url=pool, repeats=8, concurrency=2, progress=False)
    assert len(run.rollouts) == 40 and run.failures == []
    assert pool.live == pool.replicas and flaky.calls > 4  # probed at once, found answering, given more

    # lost again within reprobe_s: out until the next probe (an hour here)
    again = DropsOnce(HttpReplica(agent.url), drops={1, 3})
    pool = ReplicaPool([HttpReplica(agent.url, "host-a"), again], reprobe_s=3600)
    run = collect(rows, tmp_path / "b.jsonl", agent_url=pool, repeats=8, concurrency=2, progress=False)
    assert len(run.rollouts) == 40 and run.failures == []
    assert again.calls == 3 and pool.live == [pool.replicas[0]]
