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


# no_wasted_action: a move the state made pointless (issue 18, "the right tool for the state")


def test_frozenlake_move_into_the_edge_is_wasted_only_on_firm_ice() -> None:
    env = lake_env(["SF", "FG"], reward_config=LOCAL)
    *_, info = env.step('move(direction="up")')  # the edge: nothing changes
    assert info["step_checks"]["no_wasted_action"] == -0.25
    *_, info = env.step('move(direction="right")')
    assert info["step_checks"]["no_wasted_action"] == 0.0
    assert info["versions"]["reward"].endswith("+local0.01+checks1")
    env.close()
    slippery = lake_env(["SF", "FG"], reward_config=LOCAL, is_slippery=True)
    # on slippery ice pushing into the edge is how one avoids sliding: no such check
    assert "no_wasted_action" not in [s.name for s in slippery.step_check_specs()]
    *_, info = slippery.step('move(direction="up")')
    assert "no_wasted_action" not in info["step_checks"]
    slippery.close()


def test_sokoban_bumps_are_charged_up_to_the_cap_and_a_snapshot_does_not_carry_them() -> None:
    env = gym.make("agentgym/Sokoban-v0", reward_config=LOCAL)
    env.reset(seed=4)
    sok = env.unwrapped
    floor, player = sok._layout.floor, sok._player
    wall = next(d for d in ("up", "down", "left", "right") if player + sok._deltas[d] not in floor)
    before = sok.get_state()
    *_, info = env.step(f'move(direction="{wall}")')
    assert info["step_checks"]["no_wasted_action"] == -0.25
    sok.set_state(before)  # a branch from before the bump: its step 1 is a real move
    *_, info = env.step(sok.oracle().act())
    assert info["step_checks"]["no_wasted_action"] == 0.0
    sok.set_state(before)
    charged = []
    for _ in range(6):
        *_, info = env.step(f'move(direction="{wall}")')
        charged.append(info["step_checks"]["no_wasted_action"])
    assert charged == [-0.25] * 4 + [0.0] * 2  # episode_cap 1.0
    env.close()


def test_dungeon_a_call_the_room_refuses_is_wasted() -> None:
    task = find_task(lambda t: True)
    env = gym.make("agentgym/Dungeon-v0", reward_config=LOCAL)
    start(env, task)
    dungeon = env.unwrapped
    exits = dungeon._world.exits[dungeon._room]
    blocked = next(d for d in ("north", "south", "east", "west") if d not in exits)
    *_, info = env.step(f'go(direction="{blocked}")')
    assert info["error"]["code"] == "no_exit"
    assert info["step_checks"]["no_wasted_action"] == -0.25
    *_, info = env.step("look()")
    assert info["step_checks"]["no_wasted_action"] == 0.0
    env.close()


def test_dungeon_does_not_charge_a_call_an_injected_fault_refused() -> None:
    env = gym.make(
        "agentgym/Dungeon-v0", reward_config=LOCAL, faults={"rate": 1.0, "kinds": ["rate_limit"]}
    )
    try:
        env.reset(seed=0)
        *_, info = env.step("look()")  # a valid read; the fault refused it
        assert info["tool_calls"][0]["fault"] == "rate_limit"
        assert info["error"]["code"] == "rate_limited"
        assert info["step_checks"]["no_wasted_action"] == 0.0
        assert info["versions"]["reward"].endswith("+local0.01+checks2")
    finally:
        env.close()


def test_dungeon_a_refused_call_is_not_wasted_in_a_branch_restored_before_it() -> None:
    task = find_task(lambda t: True)
    env = gym.make("agentgym/Dungeon-v0", reward_config=LOCAL)
    start(env, task)
    dungeon = env.unwrapped
    before = dungeon.get_state()
    blocked = next(
        d
        for d in ("north", "south", "east", "west")
        if d not in dungeon._world.exits[dungeon._room]
    )
    *_, info = env.step(f'go(direction="{blocked}")')
    assert info["step_checks"]["no_wasted_action"] == -0.25
    dungeon.set_state(before)  # a branch from before the refusal: its step 1 is a read
    *_, info = env.step("look()")
    assert info["step_checks"]["no_wasted_action"] == 0.0
    env.close()
