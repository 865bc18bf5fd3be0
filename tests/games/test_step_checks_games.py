"""The games' step checks: progress toward the goal and irreversible errors."""

from __future__ import annotations

import gymnasium as gym
import pytest

import agentgym_envs  # noqa: F401  (registers the envs)
from agentgym_envs.core import RewardConfig
from tests.games.test_dungeon import find_task, start
from tests.games.test_frozenlake import lake_env

LOCAL = RewardConfig(local_weight=0.01)


def test_frozenlake_hole_is_an_irreversible_error() -> None:
    env = lake_env(["SH", "FG"], reward_config=LOCAL)
    *_, info = env.step('move(direction="right")')
    assert info["step_checks"]["no_irreversible_error"] == -1.0
    assert info["reward_components"]["local"] == pytest.approx(-0.01)
    env.close()


def test_sokoban_progress_pays_for_pushing_boxes_closer() -> None:
    env = gym.make("agentgym/Sokoban-v0", reward_config=LOCAL)
    env.reset(seed=4)
    oracle, paid = env.unwrapped.oracle(), 0.0
    while True:
        *_, terminated, truncated, info = env.step(oracle.act())
        paid += info["step_checks"]["progress"]
        assert info["step_checks"]["no_irreversible_error"] == 0.0
        if terminated or truncated:
            break
    assert paid == pytest.approx(1.0)  # all the way to the targets, each bit paid once
    env.close()


def test_sokoban_dead_square_is_charged_once() -> None:
    env = gym.make("agentgym/Sokoban-v0", reward_config=LOCAL, end_on_deadlock=False)
    sok = env.unwrapped
    for seed in range(40):
        env.reset(seed=seed)
        for move in ("up", "down", "left", "right") * 20:
            *_, terminated, truncated, info = env.step(f'move(direction="{move}")')
            if info["step_checks"]["no_irreversible_error"] or terminated or truncated:
                break
        if info["step_checks"]["no_irreversible_error"]:
            assert (
                not sok._boxes.isdisjoint(sok._layout.dead)
                or min(sok._layout.target_distance[b] for b in sok._boxes) < 0
            )
            if not (terminated or truncated):
                *_, info = env.step(f'move(direction="{move}")')
                assert info["step_checks"]["no_irreversible_error"] == 0.0
            env.close()
            return
    pytest.fail("no episode pushed a box onto a dead square")


def test_dungeon_blocked_pit_is_a_violation_and_schema_errors_are_charged() -> None:
    task = find_task(lambda t: 0 in t.spec["pits"])
    env = gym.make("agentgym/Dungeon-v0", trap_gate="block", reward_config=LOCAL)
    start(env, task)
    *_, info = env.step('go(direction="down")')
    assert info["step_checks"]["no_violation"] == -1.0
    *_, info = env.step("fly(away=True)")
    assert info["step_checks"]["schema_valid"] == -1.0
    env.close()
