"""Conformance checks every registered env must pass (used by tests and `agentgym check`).

Each check builds its envs with ``gym.make`` (so it tests what users get), raises
``ConformanceError`` with a precise message on failure, and returns a short detail
string on success.
"""

from __future__ import annotations

import math
import pickle
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
from gymnasium.utils.env_checker import check_env, data_equivalence

import agentgym_envs  # noqa: F401  (registers the envs)
from agentgym_envs.core.env import AgentEnv
from agentgym_envs.core.errors import AgentGymError
from agentgym_envs.core.info import Outcome
from agentgym_envs.registration import EnvEntry


class ConformanceError(AgentGymError, AssertionError):
    """An env broke its contract."""


Transition = tuple[str, float, bool, bool, dict[str, Any]]


def _make(entry: EnvEntry, **kwargs: Any) -> gym.Env[Any, Any]:
    return gym.make(entry.id, **kwargs)


def _agent(env: gym.Env[Any, Any]) -> AgentEnv:
    inner = env.unwrapped
    assert isinstance(inner, AgentEnv)
    return inner


def check_gym_api(entry: EnvEntry) -> str:
    """Gymnasium's ``check_env`` passes with no warning at all."""
    env = _make(entry)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check_env(env.unwrapped)
        if caught:
            raise ConformanceError(f"check_env warned: {[str(w.message) for w in caught]}")
    finally:
        env.close()
    return "check_env clean"


def oracle_episode(
    env: gym.Env[Any, Any], seed: int, options: dict[str, Any] | None = None
) -> tuple[str, dict[str, Any], list[str], list[Transition]]:
    """Play one oracle episode; returns the reset obs and info, actions and transitions."""
    obs, info = env.reset(seed=seed, options=options)
    oracle = _agent(env).oracle()
    actions: list[str] = []
    steps: list[Transition] = []
    while True:
        action = oracle.act()
        actions.append(action)
        o, r, terminated, truncated, i = env.step(action)
        result = (o, float(r), terminated, truncated, i)
        steps.append(result)
        if terminated or truncated:
            return obs, info, actions, steps


def _same(a: Any, b: Any) -> bool:
    return data_equivalence(a, b, exact=True)


def check_determinism(entry: EnvEntry, seeds: range = range(3)) -> str:
    """The same seed and options give identical observations, rewards and infos."""
    env_a, env_b = _make(entry), _make(entry)
    try:
        for seed in seeds:
            obs_a, info_a, actions, steps_a = oracle_episode(env_a, seed)
            obs_b, info_b = env_b.reset(seed=seed)
            if not (_same(obs_a, obs_b) and _same(info_a, info_b)):
                raise ConformanceError(f"seed {seed}: reset differs between two envs")
            for i, (action, step_a) in enumerate(zip(actions, steps_a, strict=True)):
                step_b = env_b.step(action)
                if not _same(step_a, step_b):
                    raise ConformanceError(f"seed {seed}: step {i + 1} differs ({action!r})")
            # reset with the seed the info reports reproduces the episode
            obs_c, _ = env_b.reset(seed=info_a["seeds"]["env"])
            if obs_c != obs_a:
                raise ConformanceError(f"seed {seed}: info['seeds']['env'] does not replay")
    finally:
        env_a.close()
        env_b.close()
    return f"{len(seeds)} oracle episodes replayed identically"


def check_snapshot(entry: EnvEntry, seeds: range = range(3)) -> str:
    """Restore a mid-episode snapshot, replay the same actions: identical results."""
    env = _make(entry)
    try:
        for seed in seeds:
            _, _, actions, steps = oracle_episode(env, seed)
            cut = len(actions) // 2
            env.reset(seed=seed)
            for action in actions[:cut]:
                env.step(action)
            state = _agent(env).get_state()
            digest = _agent(env).state_hash()
            state = pickle.loads(pickle.dumps(state))  # snapshots are plain data
            for _ in range(2):  # restore twice: a snapshot survives being used
                _agent(env).set_state(state)
                if _agent(env).state_hash() != digest:
                    raise ConformanceError(f"seed {seed}: state_hash changed after set_state")
                for i, action in enumerate(actions[cut:], start=cut):
                    if not _same(env.step(action), steps[i]):
                        raise ConformanceError(
                            f"seed {seed}: step {i + 1} after restoring differs ({action!r})"
                        )
    finally:
        env.close()
    return f"{len(seeds)} mid-episode snapshots replayed identically"


def check_close(entry: EnvEntry) -> str:
    """``close()`` twice is fine, after use too."""
    env = _make(entry)
    env.reset(seed=0)
    env.close()
    env.close()
    return "double close ok"


def check_oracle(entry: EnvEntry, seeds: range | None = None, split: str = "test") -> str:
    """The oracle succeeds on every seed of every difficulty (or, for stochastic envs,
    as often as the exact optimal success probability says, within a binomial bound).
    By default ``env.conformance_episodes`` seeds per difficulty (50; fewer for envs
    whose episodes take seconds)."""
    env = _make(entry)
    if seeds is None:
        seeds = range(_agent(env).conformance_episodes)
    try:
        difficulties = _agent(env).task_set.difficulties
        lines = []
        for difficulty in difficulties:
            wins, expected, var = 0, 0.0, 0.0
            for seed in seeds:
                env.reset(seed=seed, options={"split": split, "difficulty": difficulty})
                p = _agent(env).oracle_success_probability()
                *_, steps = oracle_episode(env, seed, {"split": split, "difficulty": difficulty})
                outcome = steps[-1][4]["outcome"]
                if outcome is Outcome.ENV_ERROR:
                    raise ConformanceError(f"{difficulty} seed {seed}: env_error")
                wins += outcome is Outcome.SUCCESS
                expected += p
                var += p * (1 - p)
                if p == 1.0 and outcome is not Outcome.SUCCESS:
                    raise ConformanceError(
                        f"{difficulty} seed {seed}: oracle ended with {outcome.value}"
                    )
            n = len(seeds)
            # 4.5 standard deviations: a false alarm about once in 150,000 runs
            if abs(wins - expected) > 4.5 * math.sqrt(var) + 1e-9:
                raise ConformanceError(
                    f"{difficulty}: oracle won {wins}/{n}, expected {expected:.1f}"
                )
            exact = "" if var == 0 else f" (optimal {expected:.1f})"
            lines.append(f"{difficulty} {wins}/{n}{exact}")
    finally:
        env.close()
    return "oracle " + ", ".join(lines)


def check_noop(entry: EnvEntry, seeds: range = range(10), split: str = "test") -> str:
    """Doing nothing (``noop_action`` each step) never succeeds."""
    env = _make(entry)
    try:
        noop = _agent(env).noop_action
        for seed in seeds:
            env.reset(seed=seed, options={"split": split})
            while True:
                _, _, terminated, truncated, info = env.step(noop)
                if terminated or truncated:
                    break
            if info["outcome"] is Outcome.SUCCESS:
                raise ConformanceError(f"seed {seed}: doing nothing succeeded")
    finally:
        env.close()
    return f"do-nothing 0/{len(seeds)}"


@dataclass(frozen=True)
class Check:
    name: str
    run: Callable[[EnvEntry], str]


CHECKS = (
    Check("gym_api", check_gym_api),
    Check("determinism", check_determinism),
    Check("snapshot", check_snapshot),
    Check("close", check_close),
    Check("oracle", check_oracle),
    Check("noop", check_noop),
)
