"""Step checks as local rewards (core.step_checks): bounded, unfarmable, off by default."""

from __future__ import annotations

import gymnasium as gym
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import agentgym_envs  # noqa: F401  (registers the envs)
from agentgym_envs.core import ConfigError, Outcome, RewardConfig
from agentgym_envs.core.rewards import RewardTally, step_reward
from agentgym_envs.core.step_checks import (
    GENERIC_SPECS,
    IRREVERSIBLE,
    CheckKind,
    StepCheck,
    StepCheckSpec,
    pay,
    step_reward_bounds,
)
from tests.games.test_frozenlake import lake_env

SPECS = {s.name: s for s in (*GENERIC_SPECS, IRREVERSIBLE)}


def test_progress_pays_only_a_new_best() -> None:
    levels: dict[str, float] = {}
    paid = [
        pay(SPECS, [StepCheck("progress", p)], levels, 50)["progress"] for p in (0.5, 0.2, 0.5, 0.7)
    ]
    assert paid == pytest.approx([0.5, 0.0, 0.0, 0.2])
    assert levels["progress"] == pytest.approx(0.7)


def test_setback_is_charged_once_and_penalties_up_to_their_cap() -> None:
    levels: dict[str, float] = {}
    charged = [pay(SPECS, [StepCheck("no_irreversible_error", -1.0)], levels, 50) for _ in range(3)]
    assert [c["no_irreversible_error"] for c in charged] == [-1.0, 0.0, 0.0]
    total = sum(
        pay(SPECS, [StepCheck("schema_valid", -1.0)], levels, 50)["schema_valid"] for _ in range(9)
    )
    assert total == pytest.approx(-5.0)  # schema_valid's episode_cap


@pytest.mark.parametrize(
    "reading",
    [StepCheck("progress", 1.5), StepCheck("schema_valid", 0.5), StepCheck("unknown", 0.0)],
)
def test_a_bad_reading_raises(reading: StepCheck) -> None:
    with pytest.raises(ConfigError, match="step check"):
        pay(SPECS, [reading], {}, 50)


def test_spec_bounds_follow_the_step_budget() -> None:
    penalty = StepCheckSpec("x", CheckKind.PENALTY, 0.5)
    assert penalty.episode_bounds(10) == (0.0, 5.0)
    assert StepCheckSpec("x", CheckKind.PENALTY, 0.5, episode_cap=2.0).episode_bounds(10) == (
        0.0,
        2.0,
    )
    assert StepCheckSpec("p", CheckKind.PROGRESS, 0.5).episode_bounds(10) == (0.5, 0.0)
    with pytest.raises(ConfigError, match="max_score"):
        StepCheckSpec("x", CheckKind.PENALTY, 0.0)


def test_default_weight_keeps_the_old_version_string() -> None:
    # the fingerprint of RewardConfig() before local_weight existed (git HEAD before issue 18)
    assert RewardConfig().version_tag == "layered-1+2b610c83"
    assert RewardConfig(local_weight=0.0).version_tag == RewardConfig().version_tag
    tag = RewardConfig(local_weight=0.01).version_tag
    assert tag != RewardConfig().version_tag and tag.endswith("+local0.01")


def test_an_over_large_weight_raises_naming_the_largest_allowed() -> None:
    config = RewardConfig(local_weight=0.3)
    assert config.max_local_weight(1.0, 0.0) == pytest.approx(0.25)
    with pytest.raises(ConfigError, match=r"below 0\.25"):
        config.check_local([(1.0, 0.0)], "a test env")
    env = gym.make("agentgym/FrozenLake-v0", reward_config=config)
    with pytest.raises(ConfigError, match="local_weight"):
        env.reset(seed=0)
    env.close()


def _play(env: gym.Env, actions: list[str], seed: int) -> tuple[float, dict, list[dict]]:
    _, info = env.reset(seed=seed)
    ret, infos = 0.0, []
    for action in actions:
        _, reward, terminated, truncated, info = env.step(action)
        ret += reward
        infos.append(info)
        if terminated or truncated:
            break
    return ret, info, infos


def test_default_weight_reports_nothing_and_pays_the_same() -> None:
    actions = ['move(direction="right")', "junk", 'move(direction="down")'] * 5
    plain = gym.make("agentgym/FrozenLake-v0")
    _, last, infos = _play(plain, actions, 3)
    assert all("step_checks" not in i and "local" not in i["reward_components"] for i in infos)
    assert last["versions"]["reward"] == "layered-1+2b610c83"
    on = gym.make("agentgym/FrozenLake-v0", reward_config=RewardConfig(local_weight=0.01))
    _, last_on, infos_on = _play(on, actions, 3)
    assert all("step_checks" in i for i in infos_on)
    assert last_on["versions"]["reward"] != last["versions"]["reward"]
    plain.close()
    on.close()


# actions an adversary sprays: valid moves (oscillation included), junk, unknown tools
FARM = [
    'move(direction="up")',
    'move(direction="down")',
    'move(direction="left")',
    'move(direction="right")',
    '{"name": "move", "arguments": {"direction": "north"}}',
    "dance()",
    "not an action",
]


def _largest_weight(env_id: str, seed: int) -> float:
    probe = gym.make(env_id, reward_config=RewardConfig(local_weight=1e-9)).unwrapped
    probe.reset(seed=seed)
    specs, steps = probe.step_check_specs(), probe.step_budget
    bounds = [s.episode_bounds(steps) for s in specs]
    probe.close()
    return RewardConfig().max_local_weight(sum(g for g, _ in bounds), sum(lo for _, lo in bounds))


@pytest.mark.parametrize("env_id", ["agentgym/FrozenLake-v0", "agentgym/Sokoban-v0"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    picks=st.lists(st.integers(0, len(FARM) - 1), min_size=1, max_size=120), seed=st.integers(0, 5)
)
def test_farming_local_scores_never_beats_a_success(
    env_id: str, picks: list[int], seed: int
) -> None:
    weight = _largest_weight(env_id, seed) * 0.999  # the most the bound allows
    config = RewardConfig(local_weight=weight)
    env = gym.make(env_id, reward_config=config)
    ret, last, infos = _play(env, [FARM[i] for i in picks], seed)
    env.close()
    low, high = config.return_bounds()
    assert low - 1e-9 <= ret <= high + 1e-9
    if last["outcome"] is not Outcome.SUCCESS:
        assert ret < config.success - config.max_penalty  # below the worst success
    paid: dict[str, float] = {}
    for info in infos:
        for name, score in info["step_checks"].items():
            paid[name] = paid.get(name, 0.0) + score
    assert paid.get("progress", 0.0) <= 1.0 + 1e-9  # progress is never re-earned
    assert paid.get("no_irreversible_error", 0.0) >= -1.0 - 1e-9
    assert all(v >= -5.0 - 1e-9 for k, v in paid.items() if k in ("schema_valid", "no_violation"))


def test_oscillating_never_re_earns_progress() -> None:
    env = gym.make("agentgym/FrozenLake-v0", reward_config=RewardConfig(local_weight=0.01))
    env.reset(seed=1)
    lake = env.unwrapped
    first = lake.oracle().act()  # a move toward the goal
    _, _, _, _, info = env.step(first)
    earned = info["step_checks"]["progress"]
    assert earned > 0
    back = {"up": "down", "down": "up", "left": "right", "right": "left"}
    direction = first.split('"')[1]
    again = 0.0
    for _ in range(10):
        for move in (back[direction], direction):
            _, _, terminated, truncated, info = env.step(f'move(direction="{move}")')
            again += info["step_checks"]["progress"]
            assert not (terminated or truncated)
    assert again == 0.0
    env.close()


def test_a_snapshot_keeps_what_the_checks_paid() -> None:
    env = gym.make("agentgym/FrozenLake-v0", reward_config=RewardConfig(local_weight=0.01))
    env.reset(seed=1)
    lake = env.unwrapped
    start = lake.get_state()
    move = lake.oracle().act()
    env.step(move)
    after = lake.get_state()
    lake.set_state(start)  # a branch from before the move earns it
    _, _, _, _, info = env.step(move)
    assert info["step_checks"]["progress"] > 0
    lake.set_state(after)  # a branch from after it does not earn it again
    direction = move.split('"')[1]
    back = {"up": "down", "down": "up", "left": "right", "right": "left"}[direction]
    env.step(f'move(direction="{back}")')
    _, _, _, _, info = env.step(move)
    assert info["step_checks"]["progress"] == 0.0
    env.close()


def test_success_returns_the_same_whatever_the_local_scores() -> None:
    env = gym.make("agentgym/Sokoban-v0", reward_config=RewardConfig(local_weight=0.01))
    plain = gym.make("agentgym/Sokoban-v0")
    returns = []
    for e in (env, plain):
        e.reset(seed=2)
        oracle, ret = e.unwrapped.oracle(), 0.0
        while True:
            _, r, terminated, truncated, info = e.step(oracle.act())
            ret += r
            if terminated or truncated:
                break
        assert info["outcome"] is Outcome.SUCCESS
        returns.append(ret)
        e.close()
    assert returns[0] == pytest.approx(returns[1])


# step_bounds with local scores (found by review: a success or a safety stop settles
# the return, so its step gives back or takes what local scores paid before it)


def _largest_lake_weight(env) -> float:
    """The largest λ that check_budget accepts for ``env`` (just below the bound)."""
    specs, steps = env.step_check_specs(), env.step_budget
    bounds = [s.episode_bounds(steps) for s in specs]
    gain, loss = sum(g for g, _ in bounds), sum(lo for _, lo in bounds)
    return RewardConfig().max_local_weight(gain, loss) * 0.999


def test_a_success_after_schema_errors_stays_within_step_bounds() -> None:
    probe = lake_env(["SG"], reward_config=RewardConfig(local_weight=1e-9))
    weight = _largest_lake_weight(probe)
    probe.close()
    config = RewardConfig(local_weight=weight)
    env = lake_env(["SG"], reward_config=config)  # reset(seed=0) accepts this λ
    low, high = step_reward_bounds(env)
    assert high > config.success  # the success step gives back the schema penalties
    rewards = []
    for _ in range(5):  # unknown tools: -1 schema_valid each, the episode cap
        _, reward, terminated, truncated, info = env.step("dance()")
        assert info["step_checks"]["schema_valid"] == -1.0
        rewards.append(reward)
        assert not (terminated or truncated)
    _, reward, terminated, _, info = env.step('move(direction="right")')
    rewards.append(reward)
    env.close()
    assert info["outcome"] is Outcome.SUCCESS
    assert config.success - config.max_penalty <= sum(rewards) <= config.success  # return ok
    assert all(low - 1e-9 <= r <= high + 1e-9 for r in rewards), (rewards, (low, high))


def test_a_safety_stop_after_local_progress_stays_within_step_bounds() -> None:
    # the tally of an episode that reached 90% of its milestone weight (Dungeon: keys,
    # doors) and was paid its generic `progress` check (the same share) at λ = 0.06,
    # below the bound for the games' checks (0.75 / 12): the next step walks into a pit
    # that trap_gate="stop" guards
    config = RewardConfig(local_weight=0.06)
    share = 0.9
    tally = RewardTally(progress=share * config.milestone_total, local=share * 0.06)
    tally.total = tally.progress + tally.local
    comps = step_reward(
        config, tally, outcome=Outcome.SAFETY_STOP, milestone_share=0.0, cost=0.0, errors=0
    )
    low, high = config.step_bounds(gain=1.0)  # the generic progress check: +1 per episode
    reward = sum(comps.values())
    assert low < config.hard_fail - config.milestone_total
    assert tally.total == pytest.approx(config.hard_fail)  # the return is settled right
    assert low - 1e-9 <= reward <= high + 1e-9, (reward, (low, high))
