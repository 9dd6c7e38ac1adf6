"""Interchangeable replicas of one run target and the pool that gives each rollout to the least busy live
one, taking a gone one out and probing it back (docs/collection.md)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from gymlab.errors import ConfigError, ReplicaGone, TransportError, TransportPeerDrop, TransportUnreachable

if TYPE_CHECKING:
    from gymlab._http.client import Client

#: Seconds before a replica taken out of rotation is probed again (None: never).
DEFAULT_REPROBE_S = 10.0


@runtime_checkable
class Replica(Protocol):
    """One replica of a collection target: runs a job, returns the ``/run`` answer."""

    name: str

    async def run(self, job: dict[str, Any], timeout_s: float | None) -> Any:
        """The ``/run`` answer for ``job``; ``ReplicaGone`` when this replica is gone."""

    async def alive(self) -> bool:
        """True when a replica taken out of rotation can take jobs again."""


class HttpReplica:
    """An agent or environment server at ``url``: ``POST {url}/run``; errors name ``server``, else the job's
    ``agent_ref``. ``client``: the run's, else one of its own (closed by ``aclose``)."""

    def __init__(self, url: str, name: str | None = None, *, server: str | None = None, client: Client | None = None):
        from gymlab._http.client import Client  # the server stack, imported only when a replica is made

        self.url = url.rstrip("/")
        self.name, self._server = name or self.url, server
        self.client, self._own_client = client or Client(), client is None

    async def run(self, job: dict[str, Any], timeout_s: float | None) -> Any:
        server = self._server or str((job.get("agent_ref") or {}).get("name") or self.url)
        try:
            return await self.client.post_ok(self.url, "/run", job, server=server, timeout=timeout_s)
        except (TransportUnreachable, TransportPeerDrop) as exc:  # refused, reset, disconnected: gone
            raise ReplicaGone(self.name, exc.cause, exc.failure) from exc  # the URL: which replica

    async def alive(self) -> bool:
        """Any HTTP answer (even a 404) from the server's root means it listens again."""
        try:
            await self.client.request("GET", self.url, "/", server=self.name, timeout=5)
        except TransportError:
            return False
        return True

    async def aclose(self) -> None:
        if self._own_client:
            await self.client.close()

    def __repr__(self) -> str:
        return f"<HttpReplica {self.url}>"


class AgentReplica:
    """An agent handle as the engine's one replica: its ``POST /run`` answer (validated by the engine)."""

    def __init__(self, agent: Any):
        self.agent, self.name = agent, str(agent.name)

    async def run(self, job: dict[str, Any], timeout_s: float | None) -> Any:
        return await self.agent.apost("/run", job)

    async def alive(self) -> bool:
        return True


@dataclass
class _Slot:
    replica: Replica
    in_flight: int = 0
    started: int = 0
    live: bool = True
    probe_at: float = 0.0
    lost_at: float = float("-inf")  # when it was last taken out of rotation


class ReplicaPool:
    """Interchangeable replicas of one target; each job goes to the live one with the fewest in flight."""

    def __init__(self, replicas: Iterable[Replica | str], *, reprobe_s: float | None = DEFAULT_REPROBE_S):
        self._slots = [_Slot(HttpReplica(r) if isinstance(r, str) else r) for r in replicas]
        if not self._slots:
            raise ConfigError("a replica pool needs at least one replica (an agent URL)")
        self.reprobe_s = reprobe_s
        self._probes: set[asyncio.Task[None]] = set()

    @property
    def name(self) -> str:
        return self._slots[0].replica.name

    @property
    def replicas(self) -> list[Replica]:
        return [s.replica for s in self._slots]

    @property
    def live(self) -> list[Replica]:
        return [s.replica for s in self._slots if s.live]

    def in_flight(self) -> dict[str, int]:
        """Rollouts running now, by replica name."""
        return {s.replica.name: s.in_flight for s in self._slots}

    def started(self) -> dict[str, int]:
        """Rollouts given to each replica so far (a moved rollout counts on each replica it reached)."""
        return {s.replica.name: s.started for s in self._slots}

    def _slot(self, replica: Replica) -> _Slot:
        return next(s for s in self._slots if s.replica is replica)

    def pick(self) -> Replica:
        """The live replica with the fewest rollouts in flight (then the fewest started)."""
        self._reprobe()
        live = [s for s in self._slots if s.live]
        slot = min(live, key=lambda s: (s.in_flight, s.started))
        slot.in_flight += 1
        slot.started += 1
        return slot.replica

    def done(self, replica: Replica) -> None:
        """``replica`` finished a job ``pick`` gave it (whatever the outcome)."""
        self._slot(replica).in_flight -= 1

    def lose(self, replica: Replica) -> bool:
        """``replica`` is gone: out of rotation unless the last live one; True when another can take its jobs."""
        slot = self._slot(replica)
        if not any(s.live and s is not slot for s in self._slots):  # the last live one stays
            return False
        if slot.live:
            now = time.monotonic()
            recently = now - slot.lost_at < (self.reprobe_s or 0.0)
            slot.live, slot.lost_at = False, now
            slot.probe_at = now + (self.reprobe_s or 0.0) if recently else now  # a first loss: probe at once
        return True

    def _reprobe(self) -> None:
        if self.reprobe_s is None:
            return
        now = time.monotonic()
        for slot in self._slots:
            if not slot.live and slot.probe_at <= now:
                slot.probe_at = float("inf")  # one probe at a time
                task = asyncio.ensure_future(self._probe(slot))
                self._probes.add(task)
                task.add_done_callback(self._probes.discard)

    async def _probe(self, slot: _Slot) -> None:
        try:
            slot.live = bool(await slot.replica.alive())
        except Exception:  # a probe that raised says the replica is not back
            slot.live = False
        if not slot.live:
            slot.probe_at = time.monotonic() + (self.reprobe_s or 0.0)

    async def aclose(self) -> None:
        """Stop the probes in progress and close the replicas' own clients."""
        for task in list(self._probes):
            task.cancel()
        await asyncio.gather(*self._probes, return_exceptions=True)
        for slot in self._slots:
            if isinstance(slot.replica, HttpReplica):
                await slot.replica.aclose()

    def __len__(self) -> int:
        return len(self._slots)

    def __repr__(self) -> str:
        parts = ", ".join(
            f"{s.replica.name} {'live' if s.live else 'out'} {s.in_flight} in flight" for s in self._slots
        )
        return f"<ReplicaPool {len(self.live)}/{len(self._slots)} live: {parts}>"


def agent_pool(
    agent_url: str | Sequence[str] | ReplicaPool, server: str | None = None, client: Client | None = None
) -> ReplicaPool:
    """The pool ``collect(agent_url=...)`` means: one URL, several URLs of the same agent, or a pool."""
    if isinstance(agent_url, ReplicaPool):
        return agent_url
    urls = [agent_url] if isinstance(agent_url, str) else list(agent_url)
    if not urls or not all(isinstance(u, str) for u in urls):
        raise ConfigError(f"agent_url: expected a URL, a list of URLs or a ReplicaPool, got {agent_url!r}")
    if len(set(urls)) != len(urls):
        raise ConfigError(f"agent_url: a URL is given twice: {', '.join(urls)}")
    return ReplicaPool([HttpReplica(url, server=server, client=client) for url in urls])
