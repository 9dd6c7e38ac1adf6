"""A cell as a collection replica (``gymlab.collection.dispatch.Replica``): one agent of one cell.

The dispatch seam gives each rollout to the live replica with the fewest in flight and moves the
rollouts of a gone replica to another, so collection (``gymlab collect --ray``) and ``run_many``
over a pool share one dispatcher with collection over several agent URLs.
"""

from __future__ import annotations

from typing import Any

from gymlab.errors import ReplicaGone
from gymlab.protocol.failure_kinds import Failure


class CellReplica:
    """``agent`` in ``cell`` (a ``CellRef``): ``run`` is its ``POST /run``, answered inside the cell."""

    def __init__(self, cell: Any, agent: str):
        self.cell, self.agent = cell, agent
        self.name = f"{agent}@cell{cell.index}"

    async def run(self, job: dict[str, Any], timeout_s: float | None) -> Any:
        """The ``/run`` answer; ``ReplicaGone`` when the cell died, ``ServerError`` when the rollout failed."""
        from gymlab.client import Reply, _parsed
        from gymlab.cluster.cell import CellGone

        cell = self.cell
        cell.in_flight += 1
        try:
            status, body = await cell.call("run", self.agent, job, timeout_s)
        except CellGone as exc:
            failure = Failure(kind="transport_peer_drop", server=self.name, message=str(exc))
            raise ReplicaGone(self.name, str(exc), failure) from None
        finally:
            cell.in_flight -= 1
        cell.done += 1
        return _parsed(Reply(status, body), "/run", self.agent)

    async def alive(self) -> bool:
        """A dead actor does not come back (cells are not restarted)."""
        return self.cell.alive

    def __repr__(self) -> str:
        return f"<CellReplica {self.name}>"
