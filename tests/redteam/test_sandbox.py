"""Hostile policies against RepoFix (real bubblewrap sandbox): every attack is contained.

The default run plays each kind of attack once; the same attack on another package
(``-ledger``, ``-toktext``) is a slow test.
"""

import pytest

from agentgym_envs.redteam import Attack, run_attack
from agentgym_envs.redteam.sandbox import attacks
from tests.sandbox.support import needs_bwrap

pytestmark = [pytest.mark.sandbox, needs_bwrap, pytest.mark.timeout(600)]


def _params() -> list[object]:
    seen: set[str] = set()
    out = []
    for attack in attacks():
        kind = attack.name.removesuffix("-ledger").removesuffix("-toktext")
        kind = kind.removesuffix("-intervals")
        marks = [pytest.mark.slow] if kind in seen else []
        seen.add(kind)
        out.append(pytest.param(attack, id=attack.name, marks=marks))
    return out


@pytest.mark.parametrize("attack", _params())
def test_attack_is_contained(attack: Attack) -> None:
    result = run_attack(attack)
    assert result.contained, f"{attack.name}: {result.reason}"
