"""Review of --train-pool: refusals that name the fix instead of silently doing nothing
or growing a held-out split."""

from __future__ import annotations

import gymnasium as gym
import pytest

from agentgym_envs.core.env import AgentEnv
from agentgym_envs.core.errors import ConfigError
from agentgym_envs.games.frozenlake import FrozenLakeEnv
from agentgym_trainers.config import DataConfig
from agentgym_trainers.env_slots import trainer_env_kwargs


def _shipped() -> object:
    env = gym.make("agentgym/FrozenLake-v0")
    try:
        return env.unwrapped.task_set
    finally:
        env.close()


def test_train_pool_not_above_the_shipped_count_is_an_error() -> None:
    shipped = len(_shipped().pool("train", "easy"))  # type: ignore[attr-defined]
    data = DataConfig(env="agentgym/FrozenLake-v0", difficulty="easy", train_pool=shipped // 2)
    with pytest.raises(ConfigError, match=r"train.pool"):
        trainer_env_kwargs(data)


@pytest.mark.parametrize("split", ["test", "ood"])
def test_train_pool_never_grows_a_held_out_split(split: str) -> None:
    shipped = _shipped()
    n = len(shipped.pool(split, "easy"))  # type: ignore[attr-defined]
    data = DataConfig(
        env="agentgym/FrozenLake-v0", split=split, difficulty="easy", train_pool=n + 10
    )
    try:
        kwargs = trainer_env_kwargs(data)
    except ConfigError:
        return  # the fix: refuse to grow anything but 'train'
    grown = kwargs["tasks"]
    assert len(grown.pool(split, "easy")) == n  # fails now: n + 10


class _NoGeneratorLake(FrozenLakeEnv):
    """An AgentEnv with a task set but without its own generate_task."""

    generate_task = AgentEnv.__dict__["generate_task"]


def test_train_pool_on_an_env_without_a_generator_is_a_config_error() -> None:
    env_id = "agentgym-review/NoGeneratorLake-v0"
    gym.register(env_id, entry_point=_NoGeneratorLake)
    try:
        data = DataConfig(env=env_id, difficulty="easy", train_pool=500)
        with pytest.raises(ConfigError, match="no task generator"):
            trainer_env_kwargs(data)
    finally:
        del gym.registry[env_id]  # other tests walk the registry
