"""CurriculumSampler: the weight formula, the update rule, sampling and resume."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentgym_envs.core.errors import ConfigError, TaskNotFoundError
from agentgym_trainers.curriculum import CurriculumSampler

IDS = ["a", "b", "c", "d"]


def _with_rates(rates: dict[str, float], **kwargs: float) -> CurriculumSampler:
    sampler = CurriculumSampler(list(rates), **kwargs)  # type: ignore[arg-type]
    sampler.load_state_dict({**sampler.state_dict(), "p": rates})
    return sampler


def test_weights_by_hand() -> None:
    sampler = _with_rates({"a": 0.5, "b": 0.1, "c": 0.9, "d": 0.3}, alpha=2.0, floor=0.05)
    # raw = (p (1 - p))^2: 0.0625, 0.0081, 0.0081, 0.0441; divided by the max 0.0625
    expected = {"a": 1.0, "b": 0.1296, "c": 0.1296, "d": 0.7056}
    assert sampler.weights() == pytest.approx(expected)


def test_floor_keeps_solved_and_failed_tasks() -> None:
    sampler = _with_rates({"a": 0.5, "b": 0.0, "c": 1.0, "d": 0.02}, floor=0.1)
    weights = sampler.weights()
    assert weights["a"] == 1.0
    assert weights["b"] == weights["c"] == 0.1
    assert weights["d"] == 0.1  # 0.0196 / 0.25 = 0.0784 is lifted to the floor
    drawn = Counter(t for _ in range(300) for t in sampler.sample(2))
    assert drawn["b"] > 0 and drawn["c"] > 0


def test_alpha_zero_is_uniform() -> None:
    sampler = _with_rates({"a": 0.5, "b": 0.0, "c": 0.9, "d": 0.3}, alpha=0.0)
    assert set(sampler.weights().values()) == {1.0}


def test_all_raw_weights_zero_is_uniform() -> None:
    sampler = _with_rates({"a": 0.0, "b": 1.0, "c": 1.0, "d": 0.0}, floor=0.2)
    assert set(sampler.weights().values()) == {1.0}


def test_prior_makes_every_task_maximal() -> None:
    sampler = CurriculumSampler(IDS)
    assert sampler.rates() == dict.fromkeys(IDS, 0.5)
    assert set(sampler.weights().values()) == {1.0}


def test_update_rule() -> None:
    sampler = CurriculumSampler(IDS, prior=0.5, decay=0.8)
    sampler.update("a", [True, True, False, True])
    assert sampler.rates()["a"] == pytest.approx(0.8 * 0.5 + 0.2 * 0.75)
    sampler.update("a", [False])
    assert sampler.rates()["a"] == pytest.approx(0.8 * 0.55)
    assert sampler.rates()["b"] == 0.5


def test_update_errors() -> None:
    sampler = CurriculumSampler(["retail-001", "retail-002"])
    with pytest.raises(TaskNotFoundError, match="Did you mean"):
        sampler.update("retail-01", [True])
    with pytest.raises(ConfigError, match="at least one outcome"):
        sampler.update("retail-001", [])


@given(k=st.integers(0, 4), seed=st.integers(0, 2**32))
def test_sample_without_replacement(k: int, seed: int) -> None:
    sampler = _with_rates({"a": 0.5, "b": 0.0, "c": 0.9, "d": 0.3}, seed=seed)
    picks = sampler.sample(k)
    assert len(picks) == k
    assert len(set(picks)) == k


def test_sample_with_replacement_when_k_exceeds_tasks() -> None:
    sampler = CurriculumSampler(IDS)
    picks = sampler.sample(10)
    assert len(picks) == 10
    assert set(picks) <= set(IDS)
    with pytest.raises(ConfigError, match="k >= 0"):
        sampler.sample(-1)


def test_sampling_follows_weights() -> None:
    sampler = _with_rates({"a": 0.5, "b": 0.0, "c": 0.0, "d": 0.0}, floor=0.05)
    drawn = Counter(sampler.sample(1)[0] for _ in range(2000))
    assert drawn["a"] / 2000 == pytest.approx(1 / 1.15, abs=0.04)


def test_seeded_reproducibility() -> None:
    first = CurriculumSampler(IDS, seed=11)
    second = CurriculumSampler(IDS, seed=11)
    other = CurriculumSampler(IDS, seed=12)
    runs = [[s.sample(3) for _ in range(20)] for s in (first, second, other)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_state_round_trip_through_json() -> None:
    sampler = CurriculumSampler(IDS, seed=5)
    sampler.update("b", [True, False])
    sampler.sample(3)
    state = json.loads(json.dumps(sampler.state_dict()))

    resumed = CurriculumSampler(IDS, seed=999)
    resumed.load_state_dict(state)
    assert resumed.rates() == sampler.rates()
    assert [resumed.sample(2) for _ in range(10)] == [sampler.sample(2) for _ in range(10)]


def test_state_with_changed_task_set() -> None:
    old = CurriculumSampler(["a", "gone"], prior=0.5)
    old.update("a", [True])
    grown = CurriculumSampler(["a", "new"], prior=0.3)
    grown.load_state_dict(old.state_dict())
    assert grown.rates() == {"a": pytest.approx(0.55), "new": 0.3}


def test_bad_state_is_rejected() -> None:
    sampler = CurriculumSampler(IDS)
    with pytest.raises(ConfigError, match="'p' and 'rng'"):
        sampler.load_state_dict({"p": {}})
    with pytest.raises(ConfigError, match="RNG state of PCG64"):
        sampler.load_state_dict({"p": {}, "rng": {"bit_generator": "MT19937"}})


@pytest.mark.parametrize(
    ("ids", "kwargs", "match"),
    [
        ([], {}, "non-empty"),
        (["a", "a"], {}, "unique"),
        (IDS, {"alpha": -0.1}, "alpha"),
        (IDS, {"floor": 0.0}, "floor"),
        (IDS, {"floor": 1.5}, "floor"),
        (IDS, {"prior": 1.1}, "prior"),
        (IDS, {"decay": 1.0}, "decay"),
        (IDS, {"decay": -0.5}, "decay"),
    ],
)
def test_config_errors(ids: list[str], kwargs: dict[str, float], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        CurriculumSampler(ids, **kwargs)  # type: ignore[arg-type]
