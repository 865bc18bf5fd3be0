"""Every registered env passes every conformance check (the same ones `agentgym check` runs)."""

import pytest

from agentgym_envs.eval.conformance import CHECKS
from agentgym_envs.registration import ENVS


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.name)
@pytest.mark.parametrize("entry", ENVS, ids=lambda e: e.name)
def test_conformance(entry, check) -> None:
    assert check.run(entry)
