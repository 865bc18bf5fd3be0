"""Observation noise: seeded, labelled, observation-only, inside the space."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentgym_envs.core import ConfigError, Outcome
from agentgym_envs.core.spaces import PRINTABLE_CHARSET, TextSpace, sanitize
from agentgym_envs.wrappers.noise import perturb
from tests.wrappers.support import ORACLE_SAMPLE, make, play

ACTIONS = ['move(direction="left")', 'move(direction="up")', "nonsense", 'move(direction="down")']


def _scripted(actions: list[str]):
    it = iter(actions * 10)
    return lambda obs, info: next(it)


def _trace(env, seed: int) -> list[tuple[str, dict]]:
    steps, _ = play(env, seed, policy=_scripted(ACTIONS), limit=8)
    return [(obs, info) for obs, _, info in steps]


def test_same_seed_same_noise_other_seed_other_noise() -> None:
    env = make("Sokoban", [{"obs_noise": {"rate": 0.3}}])
    a, b, c = _trace(env, 5), _trace(env, 5), _trace(env, 6)
    assert [o for o, _ in a] == [o for o, _ in b]
    assert [o for o, _ in a] != [o for o, _ in c]
    other = make("Sokoban", [{"obs_noise": {"rate": 0.3, "seed": 1}}])
    assert [o for o, _ in _trace(other, 5)] != [o for o, _ in a]


def test_noise_touches_the_observation_only() -> None:
    clean = make("Sokoban", [])
    noisy = make("Sokoban", [{"obs_noise": {"rate": 0.5}}])
    for (o1, i1), (o2, i2) in zip(_trace(clean, 2), _trace(noisy, 2), strict=True):
        labels = i2.pop("noise")
        assert i2.pop("versions")["wrappers"] == "obs_noise:0.5:typo,drop_line,whitespace"
        i1.pop("versions")
        assert i1 == i2  # info untouched
        assert labels["edits"] == sum(labels["by_kind"].values())
        if labels["edits"]:
            assert o1 != o2
        assert noisy.observation_space.contains(o2)


def test_rate_zero_is_the_identity() -> None:
    clean = make("Dungeon", [])
    quiet = make("Dungeon", [{"obs_noise": {"rate": 0.0}}])
    assert [o for o, _ in _trace(clean, 1)] == [o for o, _ in _trace(quiet, 1)]


def test_each_kind_does_what_it_says() -> None:
    text = "\n".join(f"line number {i} with several words" for i in range(40))
    typos, n = perturb(text, np.random.default_rng(0), 0.5, ["typo"])
    assert n["typo"] > 0 and typos.count("\n") == text.count("\n") and typos != text
    dropped, n = perturb(text, np.random.default_rng(0), 0.5, ["drop_line"])
    assert dropped.count("\n") == text.count("\n") - n["drop_line"] and n["drop_line"] > 0
    assert set(dropped.split("\n")) <= set(text.split("\n"))
    spaced, n = perturb(text, np.random.default_rng(0), 0.5, ["whitespace"])
    assert n["whitespace"] > 0 and spaced.split() == text.split()


SPACE = TextSpace(2048)


@given(
    st.text(st.sampled_from(PRINTABLE_CHARSET), max_size=300),
    st.integers(0, 2**32 - 1),
    st.floats(0, 1),
)
def test_noisy_text_stays_in_the_space(text: str, seed: int, rate: float) -> None:
    """Noise only adds letters, spaces and newlines to an observation of the space."""
    space = SPACE
    noisy, counts = perturb(text, np.random.default_rng(seed), rate)
    assert space.contains(sanitize(noisy, space.max_length))
    assert all(v >= 0 for v in counts.values())
    if text.strip():
        assert noisy.strip()  # drop_line never loses everything


@pytest.mark.parametrize("name", ["Sokoban", "Retail"])
def test_oracle_is_unaffected(name: str) -> None:
    env = make(name, [{"obs_noise": {"rate": 0.3}}])
    for seed in ORACLE_SAMPLE[name]:
        assert play(env, seed)[1]["outcome"] is Outcome.SUCCESS


def test_snapshot_round_trip_replays_the_same_noise() -> None:
    env = make("Sokoban", [{"obs_noise": {"rate": 0.4}}])
    env.reset(seed=3)
    env.step(ACTIONS[0])
    snap = env.get_state()  # type: ignore[attr-defined]
    first = [env.step(a)[0] for a in ACTIONS[1:]]
    env.set_state(snap)  # type: ignore[attr-defined]
    assert [env.step(a)[0] for a in ACTIONS[1:]] == first


def test_bad_config_raises_config_error() -> None:
    with pytest.raises(ConfigError, match="Did you mean 'typo'"):
        make("Sokoban", [{"obs_noise": {"kinds": ["typos"]}}])
    with pytest.raises(ConfigError, match="rate"):
        make("Sokoban", [{"obs_noise": {"rate": -0.1}}])
    with pytest.raises(ConfigError, match="non-empty"):
        make("Sokoban", [{"obs_noise": {"kinds": []}}])
