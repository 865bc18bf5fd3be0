"""RewardConfig arithmetic: the layered rule, bounds and versioning."""

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentgym_envs.core import ConfigError, Outcome, RewardConfig, RewardTally, step_reward

CFG = RewardConfig()


def play(cfg, steps):
    """steps: (outcome, milestone_share, cost, errors) per step; returns (return, comps)."""
    tally = RewardTally()
    total = 0.0
    per = []
    for outcome, share, cost, errors in steps:
        comps = step_reward(
            cfg, tally, outcome=outcome, milestone_share=share, cost=cost, errors=errors
        )
        per.append(comps)
        total += sum(comps.values())
    return total, per


def test_success_returns_m_minus_cost_and_ignores_progress() -> None:
    total, per = play(CFG, [(Outcome.CONTINUE, 0.5, 10, 0), (Outcome.SUCCESS, 0.5, 10, 0)])
    assert total == pytest.approx(CFG.success - 20 * CFG.cost_weight)
    assert per[0]["milestone"] == pytest.approx(0.25)
    assert per[1]["success"] == pytest.approx(CFG.success - CFG.milestone_total)


def test_failure_returns_progress_minus_cost() -> None:
    total, _ = play(CFG, [(Outcome.CONTINUE, 0.5, 3, 1), (Outcome.TIMEOUT, 0.0, 3, 0)])
    assert total == pytest.approx(0.25 - 6 * CFG.cost_weight - CFG.format_penalty)


def test_safety_stop_returns_exactly_hard_fail() -> None:
    total, per = play(CFG, [(Outcome.CONTINUE, 1.0, 5, 0), (Outcome.SAFETY_STOP, 0.0, 0, 0)])
    assert total == pytest.approx(CFG.hard_fail)
    assert per[1]["safety"] < 0


def test_env_error_pays_nothing() -> None:
    _, per = play(CFG, [(Outcome.ENV_ERROR, 1.0, 5, 1)])
    assert per[0] == dict.fromkeys(per[0], 0.0)


def test_penalties_are_capped() -> None:
    total, _ = play(CFG, [(Outcome.CONTINUE, 0.0, 1000, 50)] * 5 + [(Outcome.TIMEOUT, 0, 0, 0)])
    assert total == pytest.approx(-CFG.max_penalty)


def test_cost_and_format_are_split() -> None:
    _, per = play(CFG, [(Outcome.CONTINUE, 0.0, 2, 1)])
    assert per[0]["cost"] == pytest.approx(-2 * CFG.cost_weight)
    assert per[0]["format"] == pytest.approx(-CFG.format_penalty)


def test_config_validation_names_the_fix() -> None:
    with pytest.raises(ConfigError, match="raise success"):
        RewardConfig(success=0.6, milestone_total=0.5)
    with pytest.raises(ConfigError, match="hard_fail"):
        RewardConfig(hard_fail=-0.1)
    with pytest.raises(ConfigError, match="finite"):
        RewardConfig(cost_weight=math.nan)
    with pytest.raises(ConfigError, match=">= 0"):
        RewardConfig(format_penalty=-1)


def test_version_tag_tracks_every_field() -> None:
    assert RewardConfig().version_tag == RewardConfig().version_tag
    assert RewardConfig(cost_weight=0.003).version_tag != RewardConfig().version_tag
    assert RewardConfig().version_tag.startswith("layered-1+")
    with pytest.raises(AttributeError):
        RewardConfig().success = 2.0  # frozen


step = st.tuples(st.floats(0, 1), st.floats(0, 100, allow_nan=False), st.integers(0, 3))
terminal = st.sampled_from([Outcome.SUCCESS, Outcome.FAILURE, Outcome.TIMEOUT, Outcome.SAFETY_STOP])


@given(st.lists(step, max_size=30), step, terminal)
def test_rewards_stay_in_bounds_and_returns_follow_the_rule(middle, last, end) -> None:
    # milestone shares of one task never sum past 1
    budget, steps = 1.0, []
    for share, cost, errors in [*middle, last]:
        share = min(share, budget)
        budget -= share
        steps.append([Outcome.CONTINUE, share, cost, errors])
    steps[-1][0] = end
    total, per = play(CFG, steps)
    low, high = CFG.step_bounds()
    for comps in per:
        assert low - 1e-9 <= sum(comps.values()) <= high + 1e-9
    r_low, r_high = CFG.return_bounds()
    assert r_low - 1e-9 <= total <= r_high + 1e-9
    if end is Outcome.SAFETY_STOP:
        assert total == pytest.approx(CFG.hard_fail)
    elif end is Outcome.SUCCESS:
        assert total >= CFG.success - CFG.max_penalty - 1e-9
        assert total > CFG.milestone_total  # beats any failure
    else:
        assert total <= CFG.milestone_total + 1e-9


def test_reward_config_as_a_dict_of_its_fields_for_json_kwargs() -> None:
    """The trainer's --env-kwargs are JSON: a dict of RewardConfig fields is accepted and
    versioned exactly like the RewardConfig it names; an unknown field names the fix."""
    import gymnasium as gym

    import agentgym_envs  # noqa: F401
    from agentgym_envs.core.errors import ConfigError
    from agentgym_envs.core.rewards import RewardConfig

    by_dict = gym.make("agentgym/FrozenLake-v0", reward_config={"local_weight": 0.05})
    by_object = gym.make("agentgym/FrozenLake-v0", reward_config=RewardConfig(local_weight=0.05))
    versions = [env.reset(seed=0)[1]["versions"]["reward"] for env in (by_dict, by_object)]
    assert versions[0] == versions[1] and "local0.05" in versions[0]
    with pytest.raises(ConfigError, match="Did you mean 'local_weight'"):
        gym.make("agentgym/FrozenLake-v0", reward_config={"local_weigth": 0.05})
    with pytest.raises(ConfigError, match="a dict of its fields"):
        gym.make("agentgym/FrozenLake-v0", reward_config=[("local_weight", 0.05)])
    for bad in ({"local_weight": "0.05"}, {"success": None}, {"hard_fail": True}):
        with pytest.raises(ConfigError, match="must be a number"):
            gym.make("agentgym/FrozenLake-v0", reward_config=bad)
