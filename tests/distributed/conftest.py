"""A real two-node Ray cluster on this machine, shared by the tests of this package.

Each node is its own ``ray start`` (head on 127.0.0.2; the second node on 127.0.0.3
offers the custom resource ``node2``), with free ports and a private temp dir. The
teardown always runs: it leaves Ray in this process, then ends every process of the
cluster by pid (:meth:`LocalCluster.stop`; ``ray stop`` would also end other users'
Ray processes on a shared machine) and fails the session if any survived.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator

import pytest

from agentgym_envs.distributed.cluster import ClusterStartError, LocalCluster, NodeSpec


@pytest.fixture(scope="package")
def ray_cluster() -> Iterator[LocalCluster]:
    pytest.importorskip(
        "ray", reason="the dist extra is not installed: pip install 'agentgym-envs[dist]'"
    )
    nodes = [NodeSpec(num_cpus=1), NodeSpec(num_cpus=1, resources={"node2": 1})]
    cluster = LocalCluster(nodes)
    old = os.environ.pop("RAY_ADDRESS", None)
    try:
        try:
            cluster.start()
        except ClusterStartError as exc:  # a free port taken meanwhile: once more, new ports
            warnings.warn(f"retrying the cluster start: {exc}", stacklevel=1)
            cluster = LocalCluster(nodes).start()
        cluster.connect()
        yield cluster
    finally:
        cluster.disconnect()
        left = cluster.stop()
        if old is not None:
            os.environ["RAY_ADDRESS"] = old
        assert not left, f"Ray processes survived the cluster's stop: {left}"
