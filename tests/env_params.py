"""Parametrising tests over the registered envs, with the marks each family needs.

Browser envs are marked ``browser`` and skip (with the reason) where Chromium is missing,
unless ``AGENTGYM_REQUIRE_BROWSER=1``; ``slow`` families are skipped by default where a
test would cost minutes for them (see tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest

from agentgym_envs.registration import ENVS, EnvEntry
from tests.web.support import needs_browser


def env_params(
    entries: Iterable[EnvEntry] = ENVS, *, slow_families: Iterable[str] = ()
) -> list[object]:
    slow = set(slow_families)
    params = []
    for entry in entries:
        marks = []
        if entry.family == "web":
            marks += [pytest.mark.browser, needs_browser]
        if entry.family == "sandbox":
            marks.append(pytest.mark.sandbox)
        if entry.family in slow:
            marks.append(pytest.mark.slow)
        params.append(pytest.param(entry, marks=marks, id=entry.name))
    return params
