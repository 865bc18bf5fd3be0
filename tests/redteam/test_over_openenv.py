"""Attacks played over a local OpenEnv server (``redteam.over_openenv``): an error a policy's
text triggers on the client or the server is a breach, as an ``env_error`` is."""

from __future__ import annotations

import pytest

from agentgym_envs.redteam import attacks_for, run_attack

pytest.importorskip("openenv.core", reason="needs the openenv extra")


def _surrogates() -> object:
    (attack,) = [a for a in attacks_for("games") if a.name == "games/text-surrogates-sokoban"]
    return attack


def test_text_attacks_are_played_over_openenv_and_contained() -> None:
    attack = _surrogates()
    assert attack.openenv  # type: ignore[attr-defined]
    result = run_attack(attack, evaluator=False)  # type: ignore[arg-type]
    assert result.contained, result.reason


def test_an_error_of_the_remote_path_is_a_breach(monkeypatch) -> None:
    """What the client saw before the fix: the server could not serialise the step."""
    import agentgym_envs.integrations.openenv as openenv

    def broken(self: object, action: str) -> object:
        raise openenv.RemoteEnvError("step on the OpenEnv server: Error serializing to JSON")

    monkeypatch.setattr(openenv.OpenEnvGymEnv, "step", broken)
    result = run_attack(_surrogates(), evaluator=False)  # type: ignore[arg-type]
    assert not result.contained and "over OpenEnv" in result.reason


def test_the_remote_action_takes_any_text_a_policy_sends() -> None:
    """Bytes that are no UTF-8 made the client's model raise (the red team's OpenEnv path
    found it); lone surrogates become U+FFFD before they cross, as in ``env.step``."""
    from agentgym_envs.integrations.openenv import AgentGymAction

    assert AgentGymAction(text=b"ok \xff").text == "ok \ufffd"
    assert AgentGymAction(text="one moment \ud800").text == "one moment \ufffd"
    assert AgentGymAction(text="plain").text == "plain"


def test_cli_plays_every_attack_over_openenv_with_the_flag(monkeypatch) -> None:
    import agentgym_envs.redteam.cli as cli
    import agentgym_envs.redteam.over_openenv as over
    from agentgym_envs.cli import main
    from agentgym_envs.redteam import Attack, scripted

    plain = Attack(
        name="games/plain", family="games", hole="h", script=scripted("move(direction='up')"),
        env_id="agentgym/Sokoban-v0", max_steps=1,
    )  # fmt: skip
    played: list[str] = []
    monkeypatch.setattr(cli, "attacks_for", lambda family: [plain])
    monkeypatch.setattr(over, "openenv_verdict", lambda a: played.append(a.name) or "breach")
    assert main(["redteam", "--family", "games"]) == 0 and played == []
    assert main(["redteam", "--family", "games", "--openenv"]) == 1 and played == ["games/plain"]
