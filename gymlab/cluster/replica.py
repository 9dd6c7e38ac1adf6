"""A cell as a run replica (``gymlab.run.pool.Replica``): one agent of one cell.
The driver keeps each rollout's budget; the cell gets a little less for its own ``/run`` (docs/cluster.md).
"""

from __future__ import annotations

from typing import Any

from gymlab.errors import GymlabError, ReplicaGone, ServerError
from gymlab.protocol.failure_kinds import Failure


def cell_budget(timeout_s: float | None) -> float | None:
    """The part of a rollout's budget the cell's own ``/run`` gets: a tenth less, at most a second."""
    return None if timeout_s is None else timeout_s - min(1.0, timeout_s / 10)


class CellReplica:
    """``agent`` in ``cell`` (a ``CellRef``): ``run`` is its ``POST /run``, answered inside the cell."""

    def __init__(self, cell: Any, agent: str):
        self.cell, self.agent = cell, agent
        self.name = f"{agent}@cell{cell.index}"

    async def run(self, job: dict[str, Any], timeout_s: float | None) -> Any:
        """The ``/run`` answer within ``timeout_s``; ``ReplicaGone`` when the cell died, ``ServerError``
        when the rollout failed (a ``transport_timeout`` one when the cell did not answer in time)."""
        from gymlab._http.client import Reply, parsed, transport_error
        from gymlab.cluster.cell import CellGone

        cell = self.cell
        cell.in_flight += 1
        try:
            status, body = await cell.call("run", self.agent, job, cell_budget(timeout_s), budget=timeout_s)
        except CellGone as exc:
            failure = Failure(kind="transport_peer_drop", server=self.name, message=str(exc))
            raise ReplicaGone(self.name, str(exc), failure) from None
        except TimeoutError as exc:
            where = f"cell {cell.index} on node {cell.node_ip or '?'}"
            raise transport_error(self.name, where, "/run", exc, timeout_s) from None
        except (GymlabError, OSError):
            raise
        except Exception as exc:  # the cell's own code failed (not the rollout's servers): still one record
            cause = f"cell {cell.index} raised {type(exc).__name__}: {exc}"
            failure = Failure(kind="agent_run_error", server=self.name, message=cause)
            raise ServerError(self.name, "POST /run", 500, cause, failure=failure) from None
        finally:
            cell.in_flight -= 1
        cell.done += 1
        return parsed(Reply(status, body), "/run", self.agent)

    async def alive(self) -> bool:
        """A dead actor does not come back (cells are not restarted)."""
        return self.cell.alive

    def __repr__(self) -> str:
        return f"<CellReplica {self.name}>"
