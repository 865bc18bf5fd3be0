"""Property tests over every registered env (hypothesis)."""

import gymnasium as gym
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import agentgym_envs  # noqa: F401
from agentgym_envs.core import Outcome
from agentgym_envs.registration import ENVS
from tests.env_params import env_params

json_ish = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
).map(lambda v: __import__("json").dumps(v, default=str))

action_text = st.one_of(
    st.text(max_size=300),
    st.binary(max_size=200).map(lambda b: b.decode("latin-1")),
    st.text(alphabet=st.characters(min_codepoint=0x2000, max_codepoint=0x1FFFF), max_size=50),
    json_ish,
    st.builds(
        lambda n, a: f'{{"name": "{n}", "arguments": {a}}}',
        st.sampled_from(["move", "go", "take", "use", "look", "x"]),
        json_ish,
    ),
    st.builds(
        lambda n, a: f"{n}({a})",
        st.sampled_from(["move", "go", "take", "use", "look"]),
        st.text(max_size=30),
    ),
    st.just("x" * 100_000),
    st.just("[" * 50_000),
)


def _make(entry):
    return gym.make(entry.id, disable_env_checker=True)


@pytest.mark.parametrize("entry", env_params(slow_families=("web",)))
@given(actions=st.lists(action_text, min_size=1, max_size=6), seed=st.integers(0, 2**31 - 2))
@settings(max_examples=40)
def test_arbitrary_action_text_never_raises(entry, actions, seed) -> None:
    env = _make(entry)
    low, high = env.unwrapped.reward_config.step_bounds()
    env.reset(seed=seed)
    for text in actions:
        obs, reward, terminated, truncated, info = env.step(text)
        assert obs in env.observation_space
        assert low - 1e-9 <= reward <= high + 1e-9
        assert info["outcome"] is not Outcome.ENV_ERROR
        said = env.unwrapped._history[-1].startswith("say ")  # plain text went to the user
        if info["tool_calls"] == [] and not info["error"] and not said:
            pytest.fail(f"{text!r} produced neither a call, an error nor a message")
        if terminated or truncated:
            break
    env.close()


@pytest.mark.parametrize("entry", env_params(slow_families=("web",)))
@given(seed=st.integers(0, 2**31 - 2), split=st.sampled_from(["train", "test", "ood"]))
@settings(max_examples=25)
def test_reset_is_a_pure_function_of_seed_and_options(entry, seed, split) -> None:
    a, b = _make(entry), _make(entry)
    b.reset(seed=seed + 1)  # history must not matter
    assert a.reset(seed=seed, options={"split": split}) == b.reset(
        seed=seed, options={"split": split}
    )


@pytest.mark.parametrize("entry", env_params(slow_families=("web", "sandbox")))
@given(data=st.data(), seed=st.integers(0, 10_000))
@settings(max_examples=25)
def test_milestones_never_disappear_and_returns_stay_bounded(entry, data, seed) -> None:
    """Random valid tool calls: milestones only grow, each pays once, returns are bounded."""
    _milestones_only_grow(entry, data, seed)


# RepoFix's random calls run commands in the sandbox (seconds per episode): 4 examples
# in the default run, the full 25 in the slow one above
@pytest.mark.parametrize("entry", env_params([e for e in ENVS if e.family == "sandbox"]))
@given(data=st.data(), seed=st.integers(0, 10_000))
@settings(max_examples=4)
def test_milestones_never_disappear_in_the_sandbox(entry, data, seed) -> None:
    _milestones_only_grow(entry, data, seed)


def _milestones_only_grow(entry, data, seed) -> None:
    from agentgym_envs.policies import RandomPolicy

    env = _make(entry)
    policy = RandomPolicy(seed=seed)
    obs, info = env.reset(
        seed=seed, options={"split": data.draw(st.sampled_from(["train", "test"]))}
    )
    seen: list[str] = []
    total = 0.0
    for _ in range(60):
        action = policy.act([obs], [info])[0]
        obs, reward, terminated, truncated, info = env.step(action)
        total += reward
        assert info["milestones"][: len(seen)] == seen
        assert not set(info["new_milestones"]) & set(seen)
        seen = info["milestones"]
        if terminated or truncated:
            break
    low, high = env.unwrapped.reward_config.return_bounds()
    assert low - 1e-9 <= total <= high + 1e-9
    env.close()
