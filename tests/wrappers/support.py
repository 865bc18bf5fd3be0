"""Helpers shared by the wrapper tests: make wrapped envs and play them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym

import agentgym_envs  # noqa: F401  (registers the envs)
from agentgym_envs.core import Outcome
from agentgym_envs.registration import find
from agentgym_envs.wrappers import apply_wrappers

# a cheap sample of tasks per env for oracle checks: (env id, reset seeds)
ORACLE_SAMPLE = {
    "Sokoban": range(6),
    "Retail": range(4),
    "Calendar": range(3),
    "Dungeon": range(4),
    "FrozenLake": range(4),
}


def make(name: str, specs: list[Any], **kwargs: Any) -> gym.Env[str, str]:
    return apply_wrappers(gym.make(find(name).id, **kwargs), specs)


def play(
    env: gym.Env[str, str],
    seed: int,
    policy: Callable[[str, dict[str, Any]], str] | None = None,
    options: dict[str, Any] | None = None,
    limit: int = 400,
) -> tuple[list[tuple[str, float, dict[str, Any]]], dict[str, Any]]:
    """Play one episode; ``policy(obs, info)`` or the env's oracle. Returns the steps
    (observation, reward, info) and the last info."""
    obs, info = env.reset(seed=seed, options=options)
    oracle = env.unwrapped.oracle() if policy is None else None  # type: ignore[attr-defined]
    steps = [(obs, 0.0, info)]
    for _ in range(limit):
        action = oracle.act() if oracle is not None else policy(obs, info)  # type: ignore[misc]
        obs, reward, terminated, truncated, info = env.step(action)
        steps.append((obs, float(reward), info))
        if terminated or truncated:
            break
    return steps, info


def oracle_outcomes(env: gym.Env[str, str], seeds: range, **kw: Any) -> list[Outcome]:
    """Outcomes of the oracle's valid episodes (env errors are masked, as trainers do)."""
    outcomes = []
    for seed in seeds:
        info = play(env, seed, **kw)[1]
        if info["episode_valid"]:
            outcomes.append(info["outcome"])
    return outcomes
