"""The business family's step checks: schema, gates and milestone progress."""

from __future__ import annotations

import gymnasium as gym
import pytest

import agentgym_envs  # noqa: F401  (registers the envs)
from agentgym_envs.core import Outcome, RewardConfig


@pytest.mark.parametrize("env_id", ["agentgym/Retail-v1", "agentgym/Calendar-v2"])
def test_oracle_earns_milestone_progress_and_junk_is_charged(env_id: str) -> None:
    config = RewardConfig(local_weight=0.01)
    env = gym.make(env_id, reward_config=config)
    env.reset(seed=0)
    *_, info = env.step('{"name": "no_such_tool", "arguments": {}}')
    assert info["step_checks"]["schema_valid"] == -1.0
    oracle, progress, ret = env.unwrapped.oracle(), 0.0, 0.0
    while True:
        _, reward, terminated, truncated, info = env.step(oracle.act())
        ret += reward
        progress += info["step_checks"]["progress"]
        if info["new_milestones"]:
            assert info["step_checks"]["progress"] > 0
        if terminated or truncated:
            break
    assert info["outcome"] is Outcome.SUCCESS
    assert 0 < progress <= 1.0 + 1e-9
    env.close()
