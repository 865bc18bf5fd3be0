"""The red-team runner: each way an attack gets through is detected."""

from __future__ import annotations

import json
from typing import Any

import gymnasium as gym
import pytest

from agentgym_envs.core import Outcome
from agentgym_envs.redteam import Attack, attacks_for, run_attack, scripted
from tests.core.counter_env import CounterEnv

ENV_ID = "test/RedteamCounter-v0"


class HostileCounterEnv(CounterEnv):
    """The counter env with deliberate defects the runner must catch."""

    def step(self, action: str) -> Any:
        if action == "explode":
            raise RuntimeError("step raised")
        if action == "spin":
            while True:
                pass
        if action == "dup":  # a broken env that pays the same milestone again
            obs, reward, terminated, truncated, info = super().step("peek()")
            info["new_milestones"] = ["half"]
            return obs, reward, terminated, truncated, info
        return super().step(action)


if ENV_ID not in gym.registry:
    gym.register(id=ENV_ID, entry_point=HostileCounterEnv)


def attack(*actions: str, **kw: Any) -> Attack:
    return Attack(
        name="t/x", family="games", hole="h", env_id=ENV_ID, script=scripted(*actions), **kw
    )


@pytest.mark.parametrize(
    ("actions", "kw", "reason"),
    [
        (("add(n=1)",) * 3, {}, "SUCCESS"),
        (("add(n=1)", "explode"), {}, "raised RuntimeError"),
        (("spin",), {"step_limit_s": 0.2}, "hung"),
        (("add(n=1)", "add(n=1)"), {"no_reward": True}, "was paid"),
        (("dup", "dup"), {}, "paid more than once"),
        (("peek()",), {"expect": (Outcome.SAFETY_STOP,)}, "expected safety_stop"),
        (("peek()",), {"breach": lambda trace: "custom finding"}, "custom finding"),
    ],
)
def test_each_breach_is_detected(actions: tuple[str, ...], kw: dict[str, Any], reason: str) -> None:
    result = run_attack(attack(*actions, **kw))
    assert not result.contained
    assert reason in result.reason


def test_a_contained_attack_and_a_real_solve() -> None:
    assert run_attack(attack("add(n=13)", expect=(Outcome.SAFETY_STOP,))).contained
    assert run_attack(attack(*("add(n=1)",) * 3, may_solve=True)).contained


def test_unknown_family_names_the_choices() -> None:
    with pytest.raises(ValueError, match="games, business, sandbox, web"):
        attacks_for("gaems")


def test_cli_reports_per_family_and_fails_on_a_breach(capsys, monkeypatch) -> None:
    from agentgym_envs.cli import main

    assert main(["redteam", "--family", "games", "-k", "call-spray"]) == 0
    out = capsys.readouterr().out
    assert "games" in out and "│     4 │         4 │           0 │" in out
    assert main(["redteam", "--family", "games", "--list"]) == 0
    assert "games/dungeon-grab-0" in capsys.readouterr().out

    import agentgym_envs.redteam.cli as cli

    monkeypatch.setattr(cli, "attacks_for", lambda family: [attack(*("add(n=1)",) * 3)])
    assert main(["redteam", "--family", "games", "--json"]) == 1
    (row,) = json.loads(capsys.readouterr().out)
    assert row["contained"] is False and row["outcome"] == "success"
