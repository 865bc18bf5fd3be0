"""The Ray env pool tests share one real two-node cluster (see tests/ray_cluster.py)."""

from tests.ray_cluster import ray_cluster

__all__ = ["ray_cluster"]
