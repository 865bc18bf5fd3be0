"""Shared test settings."""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

from tests.ray_cluster import ray_cluster  # noqa: F401  (a two-node Ray cluster, on demand)

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


@pytest.fixture(scope="session", autouse=True)
def agentgym_cache(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    """One model cache for the whole session (trainer and policy tests share the SmolLM2
    conversion), in pytest's cache folder so it also survives between sessions; never
    the user's cache."""
    cache = getattr(request.config, "cache", None)  # absent under -p no:cacheprovider
    if cache is not None:
        root = Path(cache.mkdir("agentgym-model-cache"))
    else:
        root = tmp_path_factory.mktemp("agentgym-model-cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AGENTGYM_CACHE", str(root))
        yield root
