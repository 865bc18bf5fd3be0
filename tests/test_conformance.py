"""Every registered env passes every conformance check (the same ones `agentgym check` runs)."""

import pytest

from agentgym_envs.eval.conformance import CHECKS
from tests.env_params import env_params


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.name)
@pytest.mark.parametrize("entry", env_params())
def test_conformance(entry, check) -> None:
    assert check.run(entry)
