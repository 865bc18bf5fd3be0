"""Parametrising tests over the registered envs, with the marks each family needs.

Each built-in family's record names the marks its envs' tests carry
(``Family.test_marks``). Browser envs are marked ``browser`` and skip (with the reason)
where Chromium is missing, unless ``AGENTGYM_REQUIRE_BROWSER=1``; ``slow`` families are
skipped by default where a test would cost minutes for them (see tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import pytest

from agentgym_envs.registration import ENVS, EnvEntry, family
from tests.web.support import needs_browser

SKIP_WHERE_MISSING: dict[str, Any] = {"browser": needs_browser}
"""Mark name -> the skip that goes with it (what the mark needs is not installed here)."""


def env_params(
    entries: Iterable[EnvEntry] = ENVS, *, slow_families: Iterable[str] = ()
) -> list[object]:
    slow = set(slow_families)
    params = []
    for entry in entries:
        record = family(entry.family)
        marks = []
        for name in record.test_marks if record is not None else ():
            marks.append(getattr(pytest.mark, name))
            if name in SKIP_WHERE_MISSING:
                marks.append(SKIP_WHERE_MISSING[name])
        if entry.family in slow:
            marks.append(pytest.mark.slow)
        params.append(pytest.param(entry, marks=marks, id=entry.name))
    return params
