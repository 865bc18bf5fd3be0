"""Hostile policies against RepoFix (real bubblewrap sandbox): every attack is contained."""

import pytest

from agentgym_envs.redteam import Attack, run_attack
from agentgym_envs.redteam.sandbox import attacks
from tests.sandbox.support import needs_bwrap

pytestmark = [pytest.mark.sandbox, needs_bwrap, pytest.mark.timeout(600)]
ATTACKS = attacks()


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
def test_attack_is_contained(attack: Attack) -> None:
    result = run_attack(attack)
    assert result.contained, f"{attack.name}: {result.reason}"
