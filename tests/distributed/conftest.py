"""The Ray env pool tests share one real two-node cluster: the session fixture
``ray_cluster`` (tests/ray_cluster.py, registered by tests/conftest.py)."""
