"""One two-node Ray cluster for the whole session (1 CPU and an 80 MB object store each, no
dashboard, no worker logs in the test output), stopped by its own API: ``Cluster.shutdown`` ends
the processes it started, and nothing else on the host. On a loaded machine a node may miss Ray's
fixed 30 s start-up wait: the start is tried again, after ending the processes of the failed try."""

from __future__ import annotations

import contextlib
import os

import pytest

if os.environ.get("CI"):  # `make test` installs ray (the dev extra): under CI a missing ray is a failure
    import ray
else:
    ray = pytest.importorskip("ray")

OBJECT_STORE_BYTES = 80 * 1024 * 1024
START_ATTEMPTS = 3


def start_cluster():
    """A two-node local cluster, ``ray.init`` connected to it."""
    import psutil
    from ray.cluster_utils import Cluster

    me = psutil.Process()
    for attempt in range(1, START_ATTEMPTS + 1):
        before = {p.pid for p in me.children(recursive=True)}
        cluster = Cluster()
        try:
            cluster.add_node(  # no log monitor (log_to_driver is off) and no autoscaler: fewer processes to start
                num_cpus=1,
                object_store_memory=OBJECT_STORE_BYTES,
                include_dashboard=False,
                include_log_monitor=False,
                no_monitor=True,
            )
            cluster.add_node(num_cpus=1, object_store_memory=OBJECT_STORE_BYTES)
            ray.init(address=cluster.address, log_to_driver=False)
            cluster.wait_for_nodes()
            return cluster
        except Exception:
            ray.shutdown()
            cluster.shutdown()
            for process in me.children(recursive=True):  # what the failed try started and left running
                if process.pid not in before:
                    with contextlib.suppress(psutil.NoSuchProcess):
                        process.kill()
            if attempt == START_ATTEMPTS:
                raise


@pytest.fixture(scope="session")
def ray_cluster():
    cluster = start_cluster()
    try:
        yield cluster
    finally:
        ray.shutdown()
        cluster.shutdown()


@pytest.fixture(scope="session")
def node_ids(ray_cluster) -> tuple[str, str]:
    """(head node id, second node id)."""
    head = ray_cluster.head_node.node_id
    second = next(n.node_id for n in ray_cluster.worker_nodes)
    return head, second
