"""Hostile policies against WebShop (real Chromium): every attack is contained."""

import pytest

from agentgym_envs.redteam import Attack, run_attack
from agentgym_envs.redteam.web import attacks, slow_attacks
from tests.web.support import needs_browser

pytestmark = [pytest.mark.browser, needs_browser, pytest.mark.timeout(600)]
ATTACKS = attacks()
SLOW = slow_attacks()


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
def test_attack_is_contained(attack: Attack) -> None:
    result = run_attack(attack)
    assert result.contained, f"{attack.name}: {result.reason}"


@pytest.mark.slow
@pytest.mark.parametrize("attack", SLOW, ids=[a.name for a in SLOW])
def test_exhaustive_attack_is_contained(attack: Attack) -> None:
    result = run_attack(attack)
    assert result.contained, f"{attack.name}: {result.reason}"
