"""Reference policies: random calls are valid, oracle and noop bind to env slots."""

import gymnasium as gym
import pytest

import agentgym_envs  # noqa: F401
from agentgym_envs.core import ConfigError
from agentgym_envs.policies import NoopPolicy, OraclePolicy, Policy, RandomPolicy, make_policy
from tests.env_params import env_params


@pytest.mark.parametrize("entry", env_params())
def test_random_policy_only_makes_valid_calls(entry) -> None:
    env = gym.make(entry.id)
    policy = RandomPolicy(seed=1)
    obs, info = env.reset(seed=0)
    for _ in range(40):
        obs, _, term, trunc, info = env.step(policy.act([obs], [info])[0])
        assert info["error"].get("code") not in ("parse_error", "unknown_tool", "bad_arguments")
        if term or trunc:
            obs, info = env.reset()
    env.close()


def test_policies_follow_the_protocol() -> None:
    envs = [gym.make("agentgym/Sokoban-v0") for _ in range(2)]
    for policy in (OraclePolicy(envs), NoopPolicy(envs), RandomPolicy()):
        assert isinstance(policy, Policy)
    infos = [e.reset(seed=i)[1] for i, e in enumerate(envs)]
    oracle = OraclePolicy(envs)
    # slot 1 alone: the oracle must act for env 1, not env 0
    (action,) = oracle.act(["obs"], [infos[1]], [1])
    assert envs[1].step(action)[4]["error"] == {}
    with pytest.raises(ConfigError, match="Did you mean 'oracle'"):
        make_policy("oracel", envs)


def test_oracle_rejects_foreign_envs() -> None:
    with pytest.raises(ConfigError, match="agentgym envs"):
        OraclePolicy([gym.make("CartPole-v1")])
