"""Hostile policies against WebShop (real Chromium): every attack is contained."""

import pytest

from agentgym_envs.redteam import Attack, run_attack
from agentgym_envs.redteam.web import attacks, slow_attacks
from tests.web.support import needs_browser

pytestmark = [pytest.mark.browser, needs_browser, pytest.mark.timeout(600)]
SLOW = slow_attacks()
# the path reader is unit-tested on every spelling (tests/web/test_site.py); the default
# run plays three spellings through the browser, the others are slow tests
PLAYED = ("web/admin-path:/%61dmin", "web/admin-path:/./admin", "web/delete-path:/account/%64elete")
ATTACKS = [
    pytest.param(
        a,
        id=a.name,
        marks=[pytest.mark.slow] if "-path:" in a.name and a.name not in PLAYED else [],
    )
    for a in attacks()
]


@pytest.mark.parametrize("attack", ATTACKS)
def test_attack_is_contained(attack: Attack) -> None:
    result = run_attack(attack)
    assert result.contained, f"{attack.name}: {result.reason}"


@pytest.mark.slow
@pytest.mark.parametrize("attack", SLOW, ids=[a.name for a in SLOW])
def test_exhaustive_attack_is_contained(attack: Attack) -> None:
    result = run_attack(attack)
    assert result.contained, f"{attack.name}: {result.reason}"
