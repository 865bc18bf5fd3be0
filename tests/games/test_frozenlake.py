"""FrozenLake: moves, holes, goal, slippery dynamics, value iteration and the oracles."""

import math
import random

import gymnasium as gym
import numpy as np
import pytest

import agentgym_envs  # noqa: F401  (registers the envs)
from agentgym_envs.core import ConfigError, Outcome, Task
from agentgym_envs.games.frozenlake import (
    OOD_LEVELS,
    FrozenLakeEnv,
    optimal_success_probability,
    parse_lake,
)
from agentgym_envs.games.grid import DIRECTIONS, move_call

MOVE = {d: move_call(d) for d in DIRECTIONS}


def lake_env(rows: list[str], max_steps: int = 20, **kwargs) -> FrozenLakeEnv:
    """An env on a hand-made map, reset with seed 0."""
    task = Task(
        id="frozenlake-custom",
        split="test",
        difficulty="easy",
        instruction="Cross.",
        seed=0,
        spec={"rows": rows},
        solution=(),
        max_steps=max_steps,
    )
    env = FrozenLakeEnv(tasks=[task], split="test", **kwargs)
    env.reset(seed=0)
    return env


def test_moving_off_the_edge_keeps_you_in_place() -> None:
    env = lake_env(["SFF", "FHF", "FFG"])
    obs, _, terminated, truncated, info = env.step(MOVE["up"])
    assert "bump into the edge" in obs and "row 1, column 1" in obs
    assert obs.endswith("PFF\nFHF\nFFG\nYou (P) are at row 1, column 1.")
    assert info["outcome"] is Outcome.CONTINUE and not (terminated or truncated)
    obs, *_ = env.step(MOVE["right"])
    assert "You move right to row 1, column 2." in obs
    assert "SPF\nFHF\nFFG" in obs  # the start stays drawn once you leave it


def test_falling_into_a_hole_is_a_failure() -> None:
    env = lake_env(["SH", "FG"])
    obs, _, terminated, truncated, info = env.step(MOVE["right"])
    assert info["outcome"] is Outcome.FAILURE
    assert terminated and not truncated
    assert "fell into a hole at row 1, column 2" in obs


def test_reaching_the_goal_is_a_success() -> None:
    env = lake_env(["SH", "FG"])
    env.step(MOVE["down"])
    _, reward, terminated, truncated, info = env.step(MOVE["right"])
    assert info["outcome"] is Outcome.SUCCESS
    assert terminated and not truncated
    assert reward > 0.5


def test_progress_milestones_follow_the_distance_to_the_goal() -> None:
    env = lake_env(["SFFFG"])
    reached = [env.step(MOVE["right"])[4]["new_milestones"] for _ in range(3)]
    assert reached == [["progress:25"], ["progress:50"], ["progress:75"]]
    env.reset(seed=0)
    assert env.step(MOVE["left"])[4]["new_milestones"] == []  # a bump is no progress


def test_constructor_validates_success_rate_and_names_the_variant() -> None:
    for bad in (0, -0.1, 1.5, True, "high", math.nan):
        with pytest.raises(ConfigError, match="0 < success_rate <= 1"):
            FrozenLakeEnv(is_slippery=True, success_rate=bad)
    with pytest.raises(ConfigError, match="is_slippery=True"):
        FrozenLakeEnv(success_rate=0.5)
    versions = [
        FrozenLakeEnv(**kw).reset(seed=0)[1]["versions"]["env"]
        for kw in ({}, {"is_slippery": True}, {"is_slippery": True, "success_rate": 0.5})
    ]
    assert versions == ["FrozenLake-v0", "FrozenLake-v0+slippery", "FrozenLake-v0+slippery:0.5"]


def _trajectory(seed: int, actions: list[str]) -> list[str]:
    """The observations of ``actions`` on the first hard test task, reset with ``seed``."""
    env = gym.make("agentgym/FrozenLakeSlippery-v0")
    task = env.unwrapped.task_set.pool("test", "hard")[0]
    obs, _ = env.reset(seed=seed, options={"task_id": task.id})
    out = [obs]
    for action in actions:
        obs, _, terminated, truncated, _ = env.step(action)
        out.append(obs)
        if terminated or truncated:
            break
    env.close()
    return out


def test_slippery_moves_use_only_the_env_rng() -> None:
    actions = [MOVE[d] for d in ("up", "left", "down", "right") * 5]
    random.seed(1)
    np.random.seed(1)
    before = np.random.get_state()
    first = _trajectory(7, actions)
    after = np.random.get_state()
    assert (before[1] == after[1]).all() and before[2:] == after[2:]  # global RNG untouched
    random.seed(2)
    np.random.seed(2)
    assert _trajectory(7, actions) == first
    # the same task under other seeds: the slides differ
    assert len({tuple(_trajectory(seed, actions)) for seed in range(7, 15)}) > 1


def test_slides_go_sideways_with_the_configured_rates() -> None:
    rows = ["FFFFF", "FFFFF", "FFSFF", "FFFFF", "FFFFG"]
    env = lake_env(rows, success_rate=0.5, is_slippery=True)
    lake = parse_lake(tuple(rows))
    landed = {"up": 0, "left": 0, "right": 0}
    n = 4000
    for seed in range(n):
        env.reset(seed=seed)
        env.step(MOVE["up"])
        went = next(d for d, cell in lake.neighbour[lake.start].items() if cell == env._cell)
        assert went != "down", "a slide never goes backwards"
        landed[went] += 1
    for direction, p in (("up", 0.5), ("left", 0.25), ("right", 0.25)):
        assert abs(landed[direction] - n * p) < 4.5 * math.sqrt(n * p * (1 - p)), landed


def test_value_iteration_on_a_hand_made_map() -> None:
    # S G      From S, "right" reaches G with 1/3 but slides down into H with 1/3;
    # H F      "up" bumps the edge (stays) or slides right into G with 1/3, never into H.
    rows = ["SG", "HF"]
    third = 1 / 3
    assert optimal_success_probability(rows, third, 0) == 0.0
    assert optimal_success_probability(rows, third, 1) == pytest.approx(1 / 3)
    assert optimal_success_probability(rows, third, 2) == pytest.approx(5 / 9)
    assert optimal_success_probability(rows, third, 10) == pytest.approx(1 - (2 / 3) ** 10)
    # a sure-footed walker prefers "right": 0.8, then 0.8 + 0.1 * 0.8
    assert optimal_success_probability(rows, 0.8, 2) == pytest.approx(0.88)
    assert optimal_success_probability(["SG"], 0.5, 3) == pytest.approx(1 - 0.5**3)
    assert lake_env(rows, is_slippery=True).oracle().act() == MOVE["up"]
    # the oracle plans for the moves left: with 2 it takes the risk, with 20 it is patient
    # (once the goal is likely anyway, 0.1 + 0.9 V beats 0.8 + 0.1 V)
    sure = {"is_slippery": True, "success_rate": 0.8}
    assert lake_env(rows, max_steps=2, **sure).oracle().act() == MOVE["right"]
    assert lake_env(rows, max_steps=20, **sure).oracle().act() == MOVE["up"]


def test_sure_footing_makes_every_generated_map_certain() -> None:
    env = FrozenLakeEnv(split="test")
    for split in ("test", "ood"):
        for task in env.task_set.pool(split):
            rows = task.spec["rows"]
            shortest = len(task.solution)
            assert optimal_success_probability(rows, 1.0, task.max_steps) == 1.0
            assert optimal_success_probability(rows, 1.0, shortest) == 1.0
            assert optimal_success_probability(rows, 1.0, shortest - 1) == 0.0


def _wilson(wins: int, n: int, z: float = 3.29) -> tuple[float, float]:
    """The Wilson score interval of a binomial rate (z = 3.29: 99.9%, two-sided)."""
    rate = wins / n
    centre = (rate + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_slippery_oracle_matches_the_optimal_success_probability(difficulty) -> None:
    env = gym.make("agentgym/FrozenLakeSlippery-v0")
    inner = env.unwrapped
    for task in inner.task_set.pool("test", difficulty)[:2]:
        optimal = optimal_success_probability(task.spec["rows"], 1 / 3, task.max_steps)
        wins, n = 0, 300
        for seed in range(n):
            env.reset(seed=seed, options={"task_id": task.id})
            assert inner.oracle_success_probability() == pytest.approx(optimal)
            oracle = inner.oracle()
            while True:
                _, _, terminated, truncated, info = env.step(oracle.act())
                if terminated or truncated:
                    break
            wins += info["outcome"] is Outcome.SUCCESS
        low, high = _wilson(wins, n)
        assert low <= optimal <= high, f"{task.id}: won {wins}/{n}, optimal {optimal:.3f}"
    env.close()


@pytest.mark.parametrize("difficulty", ["easy", "medium", "hard"])
def test_deterministic_oracle_always_wins(difficulty) -> None:
    env = gym.make("agentgym/FrozenLake-v0")
    for seed in range(50):
        env.reset(seed=seed, options={"split": "test", "difficulty": difficulty})
        oracle = env.unwrapped.oracle()
        steps = 0
        while True:
            _, _, terminated, truncated, info = env.step(oracle.act())
            steps += 1
            if terminated or truncated:
                break
        assert info["outcome"] is Outcome.SUCCESS
        assert steps == len(env.unwrapped.task.solution)  # a shortest path
    env.close()


def test_generated_tasks_are_seeded_solvable_and_ood_sizes_are_unseen() -> None:
    assert FrozenLakeEnv.generate_task(1_000_042, "medium", "test") == FrozenLakeEnv.generate_task(
        1_000_042, "medium", "test"
    )
    task = FrozenLakeEnv.generate_task(1_000_042, "medium", "test")
    assert task is not None and task.id == "frozenlake-medium-test-1000042"
    assert FrozenLakeEnv.validate_task(task) is None
    with pytest.raises(ConfigError, match="unknown difficulty"):
        FrozenLakeEnv.generate_task(0, "extreme", "train")
    with pytest.raises(ConfigError, match="exactly one S and one G"):
        parse_lake(("SF", "FF"))
    env = FrozenLakeEnv(split="test")
    sizes = {
        split: {len(t.spec["rows"]) for t in env.task_set.pool(split)}
        for split in ("train", "test", "ood")
    }
    assert sizes["train"] == sizes["test"] == {4, 6, 8}
    assert sizes["ood"] == {side for side, _, _ in OOD_LEVELS.values()}
    assert not sizes["ood"] & sizes["train"]
    keys = [FrozenLakeEnv.task_key(t) for t in env.task_set.tasks]
    assert len(keys) == len(set(keys)) == 900
