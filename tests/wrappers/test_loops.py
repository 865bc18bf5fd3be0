"""Loop detection: repeats that change nothing are counted, charged and can end episodes."""

from __future__ import annotations

import math
from typing import Any

import pytest

from agentgym_envs.core import ConfigError, Outcome, ResetNeeded
from agentgym_envs.wrappers import LoopDetection
from tests.wrappers.support import ORACLE_SAMPLE, make, play


def _script(actions: list[str]):
    it = iter(actions)
    return lambda obs, info: next(it)


def _wall_move(env: Any) -> str:
    """A Sokoban move into a wall from the start (changes nothing)."""
    inner = env.unwrapped
    for direction, d in inner._deltas.items():
        if inner._player + d not in inner._layout.floor:
            return f'move(direction="{direction}")'
    raise AssertionError("the player has no wall next to it")


def test_repeated_noop_is_counted_and_charged() -> None:
    env = make("Dungeon", [{"loop_detection": {"window": 4, "repeat_cost": 0.5}}])
    clean = make("Dungeon", [])
    steps, _ = play(env, 0, policy=_script(["look()"] * 5), limit=5)
    plain, _ = play(clean, 0, policy=_script(["look()"] * 5), limit=5)
    loops = [i["loop"] for _, _, i in steps]
    assert [x["repeats"] for x in loops] == [0, 0, 1, 2, 3, 4]
    assert [x["detected"] for x in loops] == [False, False, True, True, True, True]
    assert [x["streak"] for x in loops] == [0, 0, 1, 2, 3, 4]
    for (_, reward, info), (_, base, _) in zip(steps[1:], plain[1:], strict=True):
        components = info["reward_components"]
        assert math.isclose(sum(components.values()), reward)
        assert components["loop"] == (-0.5 if info["loop"]["detected"] else 0.0)
        assert math.isclose(reward, base + components["loop"])
    assert steps[0][2]["reward_components"]["loop"] == 0.0
    assert steps[-1][2]["versions"]["wrappers"] == "loop:4:cost0.5"


def test_progress_is_not_a_repeat_but_oscillation_is() -> None:
    env = make("Dungeon", ["loop_detection"])
    _obs, _info = env.reset(seed=0)
    inner = env.unwrapped
    exits = sorted(inner._world.exits[inner._room])  # type: ignore[attr-defined]
    there = next(d for d in exits if inner._world.exits[inner._room][d][1] < 0)  # no door
    back = {"north": "south", "south": "north", "east": "west", "west": "east"}[there]
    loops = [env.step(f'go(direction="{d}")')[4]["loop"] for d in (there, back, there, back)]
    assert [x["detected"] for x in loops] == [False, False, True, True]


def test_a_wall_bump_repeats_and_max_repeats_truncates_honestly() -> None:
    env = make("Sokoban", [{"loop_detection": {"window": 3, "max_repeats": 3}}])
    env.reset(seed=1)
    bump = _wall_move(env)
    results = [env.step(bump) for _ in range(4)]
    obs, _, terminated, truncated, info = results[-1]
    assert [r[4]["loop"]["repeats"] for r in results] == [0, 1, 2, 3]
    assert not any(r[3] for r in results[:-1])
    assert truncated and not terminated and info["outcome"] is Outcome.TIMEOUT
    assert obs.endswith("Episode over: stuck in a loop (3 repeated actions that changed nothing).")
    assert env.observation_space.contains(obs)
    with pytest.raises(ResetNeeded):
        env.step(bump)
    assert env.reset(seed=1)[1]["loop"] == {"repeats": 0, "detected": False, "streak": 0}


def test_parse_errors_repeat_too() -> None:
    env = make("Sokoban", ["loop_detection"])
    steps, _ = play(env, 0, policy=_script(["hello"] * 3), limit=3)
    assert [i["loop"]["repeats"] for _, _, i in steps] == [0, 0, 1, 2]


@pytest.mark.parametrize("name", ["Sokoban", "Retail", "Dungeon"])
def test_oracle_never_loops(name: str) -> None:
    env = make(name, [{"loop_detection": {"max_repeats": 1, "repeat_cost": 1.0}}])
    for seed in ORACLE_SAMPLE[name]:
        _steps, info = play(env, seed)
        assert info["outcome"] is Outcome.SUCCESS and info["loop"]["repeats"] == 0


def test_snapshot_round_trip_keeps_the_window() -> None:
    env = make("Dungeon", [{"loop_detection": {"window": 5}}])
    env.reset(seed=2)
    env.step("look()")
    snap = env.get_state()  # type: ignore[attr-defined]
    first = env.step("look()")[4]["loop"]
    assert first["detected"]
    env.set_state(snap)  # type: ignore[attr-defined]
    assert env.step("look()")[4]["loop"] == first
    fresh = make("Dungeon", [{"loop_detection": {"window": 5}}])
    fresh.reset(seed=7)
    fresh.set_state(snap)  # type: ignore[attr-defined]
    assert fresh.step("look()")[4]["loop"] == first


def test_uses_the_canonical_action_so_forms_do_not_matter() -> None:
    env = make("Dungeon", ["loop_detection"])
    steps, _ = play(
        env, 0, policy=_script(["look()", '{"name": "look", "arguments": {}}']), limit=2
    )
    assert steps[-1][2]["loop"]["detected"]


def test_bad_config_raises_config_error() -> None:
    base = make("Sokoban", [])
    with pytest.raises(ConfigError, match="window"):
        LoopDetection(base, window=0)
    with pytest.raises(ConfigError, match="repeat_cost"):
        LoopDetection(base, repeat_cost=-1)
    with pytest.raises(ConfigError, match="max_repeats"):
        LoopDetection(base, max_repeats=0)
