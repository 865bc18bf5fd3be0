"""The typed views of agentgym_envs.core.views: which envs provide which, through
wrappers, and None (never an AttributeError) for an env without one."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest

from agentgym_envs.core.env import AgentEnv
from agentgym_envs.core.spaces import TextSpace
from agentgym_envs.core.views import (
    ORACLE,
    SPLIT_IDS,
    TASK_GENERATOR,
    TASK_IDS,
    TASK_SET,
    TOOLSET,
    View,
    env_view,
)

ALL = (TASK_SET, TASK_GENERATOR, TOOLSET, ORACLE, SPLIT_IDS, TASK_IDS)


class PlainEnv(gym.Env[str, str]):
    """A text env with nothing beyond the Gymnasium API."""

    def __init__(self) -> None:
        self.observation_space = TextSpace(max_length=16)
        self.action_space = TextSpace(max_length=16)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        return "", {}

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        return "", 0.0, True, False, {}


def provided(env: gym.Env[Any, Any]) -> set[View[Any]]:
    return {view for view in ALL if env_view(env, view) is not None}


@pytest.mark.parametrize("env_id", ["agentgym/FrozenLake-v0", "agentgym/Sokoban-v0"])
def test_an_agent_env_provides_its_views_through_the_wrappers(env_id: str) -> None:
    env = gym.make(env_id)
    try:
        assert env is not env.unwrapped  # gym.make wraps it
        assert isinstance(env.unwrapped, AgentEnv)
        assert provided(env) == {TASK_SET, TASK_GENERATOR, TOOLSET, ORACLE}
        tasks = env_view(env, TASK_SET)
        assert tasks is env.unwrapped and tasks.task_set.pool("train")
        tools = env_view(env, TOOLSET)
        assert tools is not None and len(tools.toolset) > 0
    finally:
        env.close()


def test_an_env_without_a_view_gives_none() -> None:
    assert provided(PlainEnv()) == set()
    assert repr(TASK_SET) == "View(TaskSetEnv)"
