"""apply_wrappers and WRAPPERS; check_env, tags and snapshots of wrapper stacks."""

from __future__ import annotations

import warnings

import gymnasium as gym
import pytest
from gymnasium.utils.env_checker import check_env

from agentgym_envs.core import ConfigError, Outcome, StateError
from agentgym_envs.wrappers import (
    WRAPPERS,
    LoopDetection,
    ObservationNoise,
    PromptInjection,
    ToolOOD,
    apply_wrappers,
)
from tests.wrappers.support import make, play

# faults are the env's (its faults argument), under every wrapper of the stack
FAULTS = {"rate": 0.2, "kinds": ["timeout", "permission_denied"]}
FULL = [
    {"tool_ood": {"seed": 1}},
    {"obs_noise": {"rate": 0.1}},
    {"prompt_injection": {"rate": 0.3}},
    {"loop_detection": {"window": 3}},
]
TAGS = (
    "tool_ood:1:rename,paraphrase"
    "+obs_noise:0.1:typo,drop_line,whitespace+prompt_injection:0.3:0+loop:3"
)


def test_registry_names_the_four_wrappers() -> None:
    assert {
        "tool_ood": ToolOOD,
        "obs_noise": ObservationNoise,
        "prompt_injection": PromptInjection,
        "loop_detection": LoopDetection,
    } == WRAPPERS


def test_specs_apply_in_order_and_tag_versions() -> None:
    env = make("Sokoban", FULL, faults=FAULTS)
    chain = []
    current = env
    while isinstance(current, gym.Wrapper):
        chain.append(type(current))
        current = current.env
    ours = [c for c in chain if c in WRAPPERS.values()]
    assert ours == [LoopDetection, PromptInjection, ObservationNoise, ToolOOD]
    _, info = env.reset(seed=0)
    assert info["versions"]["wrappers"] == TAGS
    assert info["versions"]["env"].endswith("+faults:0.2:timeout,permission_denied")
    assert apply_wrappers(current, []) is current
    single = apply_wrappers(gym.make("agentgym/Sokoban-v0"), "loop_detection")  # type: ignore[arg-type]
    assert isinstance(single, LoopDetection)


def test_full_stack_oracle_succeeds_and_is_deterministic() -> None:
    env = make("Retail", FULL, faults=FAULTS)
    runs = [play(env, seed) for seed in (0, 0, 1)]
    for _steps, info in runs:
        if info["episode_valid"]:
            assert info["outcome"] is Outcome.SUCCESS
        assert {"tool_ood", "noise", "injection", "loop"} <= set(info)
    assert any(info["cost"]["faults"] for _, info in runs)
    obs = [[o for o, _, _ in steps] for steps, _ in runs]
    assert obs[0] == obs[1] and obs[0] != obs[2]


def test_full_stack_snapshot_round_trip() -> None:
    env = make("Sokoban", FULL, faults=FAULTS)
    env.reset(seed=4)
    oracle = env.unwrapped.oracle()  # type: ignore[attr-defined]
    for _ in range(3):
        env.step(oracle.act())
    snap = env.get_state()  # type: ignore[attr-defined]
    actions = [oracle.act() for _ in range(4)]
    first = [env.step(a) for a in actions]
    other = make("Sokoban", FULL, faults=FAULTS)
    other.reset(seed=11)
    other.set_state(snap)  # type: ignore[attr-defined]
    again = [other.step(a) for a in actions]
    assert [(o, r, i) for o, r, _, _, i in first] == [(o, r, i) for o, r, _, _, i in again]


def test_snapshot_of_another_stack_is_refused() -> None:
    env = make("Sokoban", ["loop_detection"])
    env.reset(seed=0)
    snap = env.unwrapped.get_state()  # type: ignore[attr-defined]
    with pytest.raises(StateError, match="no wrapper"):
        env.set_state(snap)  # type: ignore[attr-defined]
    noisy = make("Sokoban", ["obs_noise"])
    noisy.reset(seed=0)
    with pytest.raises(StateError, match="ObservationNoise, not LoopDetection"):
        env.set_state(noisy.get_state())  # type: ignore[attr-defined]


@pytest.mark.parametrize("spec", [*FULL, FULL])
def test_check_env_passes_on_wrapped_envs(spec: object) -> None:
    specs = spec if isinstance(spec, list) else [spec]
    env = make("Dungeon", specs)  # type: ignore[arg-type]
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*different from the unwrapped")
        check_env(env, skip_render_check=True)


def test_unknown_names_and_options_suggest_the_closest() -> None:
    env = gym.make("agentgym/Sokoban-v0")
    with pytest.raises(ConfigError, match="Did you mean 'loop_detection'"):
        apply_wrappers(env, ["loop_detectoin"])
    with pytest.raises(ConfigError, match="Did you mean 'rate'"):
        apply_wrappers(env, [{"obs_noise": {"rat": 0.1}}])
    with pytest.raises(ConfigError, match="one-key mapping"):
        apply_wrappers(env, [{"obs_noise": {}, "tool_ood": {}}])
    with pytest.raises(ConfigError, match="mapping of keyword arguments"):
        apply_wrappers(env, [{"obs_noise": 0.1}])  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match="AgentEnv"):
        apply_wrappers(gym.make("CartPole-v1"), ["loop_detection"])


def test_spec_with_null_options_uses_defaults() -> None:
    env = apply_wrappers(gym.make("agentgym/Sokoban-v0"), [{"obs_noise": None}])
    assert isinstance(env, ObservationNoise) and env.rate == 0.05
