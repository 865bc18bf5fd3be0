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


# -- the evaluator's path (issue 26) ----------------------------------------------------

EVAL_ENV = f"tests.redteam.test_runner:{ENV_ID}"  # module:Id, as a suite entry names it


class _Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text for this value")


class PoisonCounterEnv(HostileCounterEnv):
    """Returns, on ``poison``, a call record whose value nothing can write: fine for
    ``env.step``, fatal for the recorder at the episode's end."""

    def step(self, action: str) -> Any:
        obs, reward, terminated, truncated, info = super().step(
            "peek()" if action == "poison" else action
        )
        if action == "poison":
            info["tool_calls"] = [{"name": "peek", "arguments": {"v": _Unprintable()}}]
        return obs, reward, terminated, truncated, info


POISON_ID = "test/RedteamPoisonCounter-v0"
if POISON_ID not in gym.registry:
    gym.register(id=POISON_ID, entry_point=PoisonCounterEnv)


def test_a_break_in_the_evaluators_path_is_a_breach() -> None:
    """The env path sees nothing wrong; the evaluator's path, where the recorder writes
    the episode, ends it as env_error: a breach only it can see."""
    poison = Attack(
        name="t/poison", family="games", hole="h", script=scripted("poison", "add(n=1)"),
        env_id=f"tests.redteam.test_runner:{POISON_ID}",
    )  # fmt: skip
    assert run_attack(poison).contained
    result = run_attack(poison, evaluator=True)
    assert not result.contained and "env_error in the evaluator path" in result.reason
    marked = Attack(**{**poison.__dict__, "evaluator": True})
    assert not run_attack(marked).contained
    fine = Attack(**{**attack("add(n=1)", "peek()").__dict__, "env_id": EVAL_ENV})
    assert run_attack(fine, evaluator=True).contained
    with pytest.raises(ValueError, match="module:Id"):  # gym's registry alone: no entry
        run_attack(attack("add(n=1)"), evaluator=True)


def test_the_evaluators_path_is_recorded_reported_and_watched(tmp_path) -> None:
    from agentgym_envs.redteam.evaluator import evaluator_verdict
    from agentgym_envs.store import TrajectoryStore

    played = Attack(
        name="t/x", family="games", hole="h", env_id=EVAL_ENV, script=scripted("add(n=1)")
    )
    assert evaluator_verdict(played, tmp_path) is None
    with TrajectoryStore(tmp_path / "trajectories.sqlite") as store:
        ((_, episode),) = store.query()
    assert episode.actions[0] == "add(n=1)" and set(episode.actions[1:]) == {""}
    assert episode.outcome == "timeout"  # empty actions until the step budget ends it
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["episodes"][0]["outcome"] == "timeout" and (tmp_path / "report.md").exists()
    assert len((tmp_path / "episodes.jsonl").read_text().splitlines()) == 1
    spin = Attack(**{**played.__dict__, "script": scripted("spin"), "step_limit_s": 0.2})
    assert "hung" in (evaluator_verdict(spin) or "")
    solve = Attack(**{**played.__dict__, "script": scripted(*("add(n=1)",) * 3)})
    assert "SUCCESS" in (evaluator_verdict(solve) or "")
    odd = Attack(**{**played.__dict__, "options": {"task_seed": 1}})
    with pytest.raises(ValueError, match="task_seed"):
        evaluator_verdict(odd)


def test_cli_plays_every_attack_through_the_evaluator_with_the_flag(capsys, monkeypatch) -> None:
    import agentgym_envs.redteam.cli as cli
    from agentgym_envs.cli import main

    poison = Attack(
        name="t/poison", family="games", hole="h", script=scripted("poison"),
        env_id=f"tests.redteam.test_runner:{POISON_ID}",
    )  # fmt: skip
    monkeypatch.setattr(cli, "attacks_for", lambda family: [poison])
    assert main(["redteam", "--family", "games"]) == 0
    assert main(["redteam", "--family", "games", "--evaluator"]) == 1
    assert "env_error in the evaluator path" in capsys.readouterr().out
