"""The SkyRL adapter against the real skyrl-gym: envs made with ``skyrl_gym.make`` as
SkyRL's generator makes them (an OmegaConf ``env_config``, the dataset row as ``extras``,
``max_turns`` added), played as its agent loop plays them, step by step against a local
twin of the same env: rewards and done flags must be the env's.

skyrl-gym is a test dependency (the ``skyrl`` extra, installed by ``make install``):
without it this module fails to import with the install command, it is never skipped.
"""

from __future__ import annotations

import copy
from typing import Any

import gymnasium as gym
import pytest

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.integrations.extras import require

# first: without skyrl-gym, collection fails here with the pip command (never a skip)
require("skyrl_gym", "skyrl-gym", "skyrl", "tests/integrations/test_skyrl.py")

import skyrl_gym  # noqa: E402
from omegaconf import OmegaConf  # noqa: E402
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput  # noqa: E402
from skyrl_gym.envs.registration import deregister  # noqa: E402
from skyrl_gym.metrics import aggregate_for_environment  # noqa: E402

from agentgym_envs.integrations.skyrl import (  # noqa: E402
    SKYRL_ENV_CLASS,
    AgentGymTextEnv,
    register_skyrl_env,
    skyrl_rows,
)


@pytest.fixture(scope="module", autouse=True)
def registered() -> str:
    return register_skyrl_env()


def _make(row: dict[str, Any], max_turns: int = 100) -> BaseTextEnv:
    """As SkyRL's generator does: the row minus prompt and env_class is ``extras``."""
    extras = {k: v for k, v in copy.deepcopy(row).items() if k not in ("prompt", "env_class")}
    extras["max_turns"] = max_turns
    env = skyrl_gym.make(row["env_class"], env_config=OmegaConf.create({}), extras=extras)
    assert isinstance(env, BaseTextEnv) and isinstance(env, AgentGymTextEnv)
    return env


def _play(env_id: str, split: str, actions: str, max_turns: int = 100) -> dict[str, Any]:
    """One episode through SkyRL's loop and a local twin; every step must agree."""
    row = skyrl_rows(env_id, split=split, limit=1, seed=4)[0]
    env = _make(row, max_turns)
    twin = gym.make(row["env_id"])
    twin_obs, twin_info = twin.reset(seed=4, options={"task_id": row["task_id"]})
    chat, metadata = env.init(copy.deepcopy(row["prompt"]))
    assert chat == row["prompt"] and chat[1]["content"] == twin_obs
    assert chat[0] == {"role": "system", "content": twin_info["system"]}
    assert metadata["tools"] == twin_info["tools"]
    oracle = twin.unwrapped.oracle()  # type: ignore[attr-defined]
    total, turns = 0.0, 0
    done = False
    while not done:
        action = oracle.act() if actions == "oracle" else "I give up."
        out = env.step(action)
        obs, reward, terminated, truncated, info = twin.step(action)
        turns += 1
        total += reward
        assert set(out) <= set(BaseTextEnvStepOutput.__annotations__)
        assert out["reward"] == pytest.approx(reward)
        done = out["done"]
        if not out["metadata"]["turn_limit"]:
            assert done == (terminated or truncated)
            assert out["metadata"]["terminated"] == terminated
            assert out["metadata"]["truncated"] == truncated
        assert out["metadata"]["outcome"] == str(info["outcome"])
        if done:
            assert out["observations"] == [] and out["metadata"]["final_observation"] == obs
        else:
            assert out["observations"] == [{"role": "user", "content": obs}]
        chat += [{"role": "assistant", "content": action}, *out["observations"]]
    metrics = env.get_metrics()
    env.close()
    env.close()  # idempotent
    twin.close()
    assert metrics["turns"] == turns and metrics["return"] == pytest.approx(total)
    return {"metrics": metrics, "info": info, "last": out, "chat": chat}


@pytest.mark.parametrize("env_id", ["agentgym/Sokoban-v0", "agentgym/Retail-v1"])
def test_an_oracle_episode_matches_the_env(env_id: str) -> None:
    played = _play(env_id, "test", "oracle")
    assert played["last"]["metadata"]["outcome"] == "success"
    assert played["metrics"]["success"] == 1.0
    assert played["chat"][-1]["role"] == "assistant"  # no observation after the end
    aggregated = aggregate_for_environment(SKYRL_ENV_CLASS, [played["metrics"]])
    assert aggregated["success"] == 1.0


def test_a_failed_episode_matches_the_env() -> None:
    played = _play("agentgym/Sokoban-v0", "train", "give up")
    last = played["last"]
    assert last["metadata"]["outcome"] in ("failure", "timeout")
    assert last["metadata"]["terminated"] or last["metadata"]["truncated"]
    assert played["metrics"]["success"] == 0.0


def test_the_generators_max_turns_ends_the_episode() -> None:
    row = skyrl_rows("agentgym/Retail-v1", split="test", limit=1)[0]
    env = _make(row, max_turns=2)
    env.init(row["prompt"])
    assert env.step("Hello, how can I help?")["done"] is False
    out = env.step("Let me check.")
    assert out["done"] is True and out["metadata"]["turn_limit"] is True
    assert out["metadata"]["terminated"] is False and out["metadata"]["truncated"] is False
    assert out["observations"] == []
    env.close()


def test_rows_read_the_episode_from_extra_info_and_the_env_config() -> None:
    config = OmegaConf.create({"env_id": "Sokoban", "make_kwargs": {"max_steps": 3}})
    env = skyrl_gym.make(
        SKYRL_ENV_CLASS,
        env_config=config,
        extras={"extra_info": {"seed": 2, "options": {"split": "test", "difficulty": "easy"}}},
    )
    _chat, meta = env.init([])
    assert meta["task"]["split"] == "test" and meta["task"]["difficulty"] == "easy"
    outs = [env.step("nothing") for _ in range(3)]
    assert [o["done"] for o in outs] == [False, False, True]  # max_steps=3 from make_kwargs
    assert outs[-1]["metadata"]["truncated"] is True
    env.close()


def test_configuration_mistakes_are_clear() -> None:
    with pytest.raises(ConfigError, match="needs an env id"):
        skyrl_gym.make(SKYRL_ENV_CLASS, env_config={}, extras={"task_id": "x"})
    with pytest.raises(KeyError, match="Did you mean"):
        skyrl_gym.make(SKYRL_ENV_CLASS, env_config={}, extras={"env_id": "Sokobam"})
    assert register_skyrl_env() == SKYRL_ENV_CLASS  # registering again is harmless
    skyrl_gym.register(id="agentgym_other", entry_point="skyrl_gym.envs.gsm8k.env:GSM8kEnv")
    try:
        with pytest.raises(ConfigError, match="already registered"):
            register_skyrl_env("agentgym_other")
    finally:
        deregister("agentgym_other")


def test_rows_survive_a_parquet_round_trip(tmp_path: Any) -> None:
    """The documented path: rows to parquet with pandas, read back, made as SkyRL does."""
    import pandas as pd

    rows = skyrl_rows("Sokoban", split="test", limit=3)
    assert [r["env_class"] for r in rows] == [SKYRL_ENV_CLASS] * 3
    assert len({r["task_id"] for r in rows}) == 3
    pd.DataFrame(rows).to_parquet(tmp_path / "train.parquet")
    back = pd.read_parquet(tmp_path / "train.parquet").to_dict("records")
    for row, original in zip(back, rows, strict=True):
        prompt = [dict(m) for m in row["prompt"]]  # parquet gives arrays of mappings
        env = _make({**row, "prompt": prompt})
        chat, _ = env.init(prompt)
        assert chat == original["prompt"] == prompt
        env.close()
