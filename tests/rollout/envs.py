"""Envs for the rollout layer's tests (module-level, so worker processes can build them)."""

from __future__ import annotations

from typing import Any

import gymnasium as gym

import agentgym_envs  # noqa: F401  (registers the envs in a fresh worker process)
from agentgym_envs.core.errors import ConfigError

LAKE = "agentgym/FrozenLake-v0"
TASK = "frozenlake-easy-train-1"


def lake() -> gym.Env[Any, Any]:
    return gym.make(LAKE)


class Breaking(gym.Env[str, str]):
    """Raises ``error`` at reset when the seed is 1, and at every step when it is 2."""

    def __init__(self, error: type[Exception] = RuntimeError) -> None:
        self.error = error
        self.seed = 0
        self.closed = False

    def close(self) -> None:
        self.closed = True

    def reset(self, *, seed: int | None = None, options: Any = None) -> tuple[str, dict[str, Any]]:
        self.seed = seed or 0
        if self.seed == 1:
            raise self.error("no reset today")
        return "start", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        if self.seed == 2:
            raise self.error("no step today")
        return action, 1.0, True, False, {}


def breaking_config() -> gym.Env[Any, Any]:
    return Breaking(ConfigError)
