"""One two-node Ray cluster for the whole session (1 CPU and an 80 MB object store each, no
dashboard, no worker logs in the test output), stopped by its own API: ``Cluster.shutdown`` ends
the processes it started, and nothing else on the host."""

from __future__ import annotations

import os

import pytest

if os.environ.get("CI"):  # `make test` installs ray (the dev extra): under CI a missing ray is a failure
    import ray
else:
    ray = pytest.importorskip("ray")

OBJECT_STORE_BYTES = 80 * 1024 * 1024


@pytest.fixture(scope="session")
def ray_cluster():
    from ray.cluster_utils import Cluster

    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "object_store_memory": OBJECT_STORE_BYTES, "include_dashboard": False},
    )
    try:
        cluster.add_node(num_cpus=1, object_store_memory=OBJECT_STORE_BYTES)
        ray.init(address=cluster.address, log_to_driver=False)
        cluster.wait_for_nodes()
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
