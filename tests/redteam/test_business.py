"""The business red team: every hostile policy must be contained (issue 13, items 11-12)."""

import pytest

from agentgym_envs.redteam.business import attacks, auth_spray_attacks, spray_attacks
from agentgym_envs.redteam.core import run_attack


@pytest.mark.parametrize("attack", attacks(), ids=lambda a: a.name)
def test_business_attack_is_contained(attack) -> None:
    result = run_attack(attack)
    assert result.contained, result.reason


@pytest.mark.slow
def test_answer_spray_solves_no_test_task() -> None:
    """The fixed spray over every test task of Retail and Calendar (it solved 31 of 300
    Retail and 12 of 300 Calendar tasks before the typed, read-checked answers)."""
    got_through = [
        (a.name, r.reason)
        for a in spray_attacks(every=1) + auth_spray_attacks(every=1)
        if not (r := run_attack(a)).contained
    ]
    assert not got_through, f"{len(got_through)} got through, e.g. {got_through[:3]}"
