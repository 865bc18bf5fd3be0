"""Hostile policies against the text games: every attack is contained."""

import pytest

from agentgym_envs.redteam import Attack, attacks_for, run_attack

ATTACKS = attacks_for("games")


@pytest.mark.parametrize("attack", ATTACKS, ids=[a.name for a in ATTACKS])
def test_attack_is_contained(attack: Attack) -> None:
    result = run_attack(attack)
    assert result.contained, f"{attack.name}: {result.reason}"
