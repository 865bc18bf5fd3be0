"""A real two-node Ray cluster on this machine: the ``ray_cluster`` fixture of the tests
that need one (``tests/distributed``, ``tests/trainers``), registered by tests/conftest.py.
Session-scoped: one cluster per test process (each xdist worker starts its own, on first
use), because Ray keeps the first cluster's auth token for the life of a process, and a
second cluster in the same process would refuse this driver.

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


def forget_auth_token() -> None:
    """Drop the Ray auth token this process cached: each package's cluster has a token of
    its own, and Ray keeps the first one it read for the life of the process (the next
    cluster then refuses this driver). Called while no cluster is joined, after
    :meth:`LocalCluster.disconnect` re-read the (non-token) auth mode."""
    from ray._raylet import AuthenticationTokenLoader  # type: ignore[attr-defined]

    AuthenticationTokenLoader.instance().reset_cache()


@pytest.fixture(scope="session")
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
        forget_auth_token()
        cluster.connect()
        yield cluster
    finally:
        cluster.disconnect()
        forget_auth_token()
        left = cluster.stop()
        if old is not None:
            os.environ["RAY_ADDRESS"] = old
        assert not left, f"Ray processes survived the cluster's stop: {left}"
