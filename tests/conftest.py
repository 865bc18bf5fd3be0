"""Shared test settings."""

import os

import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "default", deadline=None, suppress_health_check=[HealthCheck.too_slow], max_examples=60
)
settings.register_profile("ci", parent=settings.get_profile("default"), max_examples=150)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip `slow` tests (full SmolLM2 runs, whole-task-set sweeps of RepoFix) unless asked
    for: run them with ``-m slow`` or ``AGENTGYM_SLOW=1``. The skip reason is printed."""
    if "slow" in (config.option.markexpr or "") or os.environ.get("AGENTGYM_SLOW") == "1":
        return
    skip = pytest.mark.skip(reason="slow: run with -m slow or AGENTGYM_SLOW=1")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
