"""Advantage estimators checked against hand computations."""

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from agentgym_trainers.algorithms import (
    RunningBaseline,
    discounted_returns,
    gae,
    grpo_advantages,
    reinforce_advantages,
    rloo_advantages,
    time_aware_discounts,
    whiten,
    zero_variance_groups,
)

EPS = 1e-6


def t(*xs: float) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.float32)


def ids(*xs: int) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.int64)


def flags(*xs: int) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.bool)


# ---------------------------------------------------------------- GRPO


def test_grpo_two_successes_two_failures() -> None:
    # mean 0.5, population std 0.5 -> +-0.5 / (0.5 + eps)
    adv, kept = grpo_advantages(t(1, 0, 0, 1), ids(7, 7, 7, 7), flags(1, 1, 1, 1))
    a = 0.5 / (0.5 + EPS)
    torch.testing.assert_close(adv, t(a, -a, -a, a))
    assert kept.all()


def test_grpo_scale_none_is_mean_centred_only() -> None:
    adv, kept = grpo_advantages(
        t(1, 0, 0, 1, 3), ids(0, 0, 0, 0, 0), flags(1, 1, 1, 1, 1), scale="none"
    )
    # mean = 5 / 5 = 1
    torch.testing.assert_close(adv, t(0, -1, -1, 0, 2))
    assert kept.all()


def test_grpo_stats_over_valid_members_only() -> None:
    # third member is an env error with a NaN reward: mean of {1, 3} = 2, std = 1
    adv, kept = grpo_advantages(t(1, 3, math.nan), ids(0, 0, 0), flags(1, 1, 0))
    torch.testing.assert_close(adv, t(-1 / (1 + EPS), 1 / (1 + EPS), 0))
    assert kept.tolist() == [True, True, False]


def test_grpo_drops_singletons_and_groups_left_with_one_valid_member() -> None:
    rewards = t(1, 0, 1, 0.5, 0.2)
    groups = ids(0, 0, 1, 2, 2)  # group 1 is a singleton; group 2's other member is invalid
    valid = flags(1, 1, 1, 1, 0)
    adv, kept = grpo_advantages(rewards, groups, valid)
    assert kept.tolist() == [True, True, False, False, False]
    assert adv[2:].tolist() == [0.0, 0.0, 0.0]
    assert zero_variance_groups(rewards, groups, valid) == (0, 1)


def test_grpo_zero_variance_group_is_exactly_zero_and_kept() -> None:
    # 0.1 does not survive sum/count exactly in float; the result must still be exactly 0
    rewards = t(0.1, 0.1, 0.1, 1, 0)
    groups = ids(3, 3, 3, 9, 9)
    valid = flags(1, 1, 1, 1, 1)
    for scale in ("std", "none"):
        adv, kept = grpo_advantages(rewards, groups, valid, scale=scale)
        assert adv[:3].tolist() == [0.0, 0.0, 0.0]
        assert kept.all()
    assert zero_variance_groups(rewards, groups, valid) == (1, 2)


def test_grpo_invalid_members_get_zero_and_are_not_kept() -> None:
    adv, kept = grpo_advantages(t(math.inf, 1, 0, math.nan), ids(0, 0, 0, 0), flags(0, 1, 1, 0))
    assert adv[0].item() == 0.0 and adv[3].item() == 0.0
    assert kept.tolist() == [False, True, True, False]
    assert torch.isfinite(adv).all()


def test_grpo_empty_batch() -> None:
    adv, kept = grpo_advantages(t(), ids(), flags())
    assert adv.shape == (0,) and kept.shape == (0,)


def test_grpo_rejects_bad_inputs() -> None:
    with pytest.raises(ValueError, match="valid must be a bool"):
        grpo_advantages(t(1, 0), ids(0, 0), torch.ones(2))
    with pytest.raises(ValueError, match="scale"):
        grpo_advantages(t(1, 0), ids(0, 0), flags(1, 1), scale="mad")  # type: ignore[arg-type]


# ---------------------------------------------------------------- RLOO


def test_rloo_leave_one_out() -> None:
    adv, kept = rloo_advantages(t(1, 2, 3), ids(0, 0, 0), flags(1, 1, 1))
    # baselines: mean(2, 3) = 2.5, mean(1, 3) = 2, mean(1, 2) = 1.5
    torch.testing.assert_close(adv, t(1 - 2.5, 2 - 2, 3 - 1.5))
    assert kept.all()


def test_rloo_excludes_invalid_and_drops_singletons() -> None:
    rewards = t(1, 2, 100, 3, 5)
    groups = ids(0, 0, 0, 0, 1)
    valid = flags(1, 1, 0, 1, 1)
    adv, kept = rloo_advantages(rewards, groups, valid)
    torch.testing.assert_close(adv, t(1 - 2.5, 2 - 2, 0, 3 - 1.5, 0))
    assert kept.tolist() == [True, True, False, True, False]


# ---------------------------------------------------------------- REINFORCE


def test_running_baseline_by_hand() -> None:
    b = RunningBaseline(decay=0.9)
    assert b.value is None
    r1, v1 = t(1, 3, math.nan), flags(1, 1, 0)
    adv, kept = b.advantages(r1, v1)  # baseline 0.0 before the first update
    torch.testing.assert_close(adv, t(1, 3, 0))
    assert kept.tolist() == [True, True, False]
    b.update(r1, v1)
    assert b.value == pytest.approx(2.0)  # the first update takes the batch mean as is
    r2, v2 = t(5, 7), flags(1, 1)
    adv, _ = b.advantages(r2, v2)
    torch.testing.assert_close(adv, t(5 - 2, 7 - 2))
    b.update(r2, v2)
    assert b.value == pytest.approx(0.9 * 2.0 + 0.1 * 6.0)  # 2.4
    b.update(t(1.0), flags(0))  # no valid episode: unchanged
    assert b.value == pytest.approx(2.4)

    state = b.state_dict()
    assert all(isinstance(v, float) for v in state.values())
    restored = RunningBaseline(decay=0.5)
    restored.load_state_dict(state)
    assert restored.value == b.value and restored.decay == 0.9


def test_running_baseline_rejects_bad_decay() -> None:
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        RunningBaseline(decay=1.0)


def test_reinforce_advantages() -> None:
    adv, kept = reinforce_advantages(t(1, 0.5, math.nan), flags(1, 1, 0), 0.25)
    torch.testing.assert_close(adv, t(0.75, 0.25, 0))
    assert kept.tolist() == [True, True, False]


# ---------------------------------------------------------------- GAE


def test_gae_by_hand_skips_non_agent_tokens() -> None:
    gamma, lam = 0.9, 0.8
    mask = torch.tensor([[1, 1, 0, 0, 1, 0]], dtype=torch.bool)
    rewards = t(0.5, 0.0, 0.0, 0.0, 1.0, 0.0)[None]
    values = t(0.2, 0.4, 7.0, 7.0, 0.6, 7.0)[None]  # 7.0 at mask-0 positions must be ignored
    # Agent tokens are t=0, 1, 4; going backwards:
    # t=4 (last agent token, bootstraps 0): delta = 1.0 + 0.9*0 - 0.6 = 0.4, A = 0.4
    a4 = 1.0 + gamma * 0.0 - 0.6
    # t=1 (next agent token is t=4): delta = 0 + 0.9*0.6 - 0.4 = 0.14
    #   A = 0.14 + 0.9*0.8*0.4 = 0.14 + 0.288 = 0.428
    a1 = (0.0 + gamma * 0.6 - 0.4) + gamma * lam * a4
    # t=0: delta = 0.5 + 0.9*0.4 - 0.2 = 0.66, A = 0.66 + 0.72*0.428 = 0.96816
    a0 = (0.5 + gamma * 0.4 - 0.2) + gamma * lam * a1
    assert (a4, a1, a0) == pytest.approx((0.4, 0.428, 0.96816))
    adv, ret = gae(rewards, values, mask, gamma=gamma, lam=lam)
    torch.testing.assert_close(adv, t(a0, a1, 0, 0, a4, 0)[None])
    # returns = A + V: 1.16816, 0.828, 1.0
    torch.testing.assert_close(ret, t(a0 + 0.2, a1 + 0.4, 0, 0, a4 + 0.6, 0)[None])
    assert adv[0, [2, 3, 5]].tolist() == [0.0, 0.0, 0.0]
    assert ret[0, [2, 3, 5]].tolist() == [0.0, 0.0, 0.0]


def test_gae_gamma_tensor_is_per_token() -> None:
    mask = torch.ones(1, 3, dtype=torch.bool)
    gamma = t(1.0, 0.5, 0.3)[None]  # the last gamma multiplies the terminal 0: irrelevant
    # t=2: 1; t=1: 0 + 0.5*1 = 0.5; t=0: 0 + 1.0*0.5 = 0.5
    adv, ret = gae(t(0, 0, 1)[None], torch.zeros(1, 3), mask, gamma=gamma, lam=1.0)
    torch.testing.assert_close(adv, t(0.5, 0.5, 1)[None])
    torch.testing.assert_close(ret, adv)


def test_gae_rows_with_different_masks() -> None:
    mask = torch.tensor([[1, 0, 1, 1], [0, 1, 1, 0]], dtype=torch.bool)
    rewards = torch.tensor([[1.0, 0, 0, 2], [0, 3, 1, 0]])
    # row 0: t=3: 2; t=2: 0 + 0.5*2 = 1; t=0: 1 + 0.5*1 = 1.5
    # row 1: t=2: 1; t=1: 3 + 0.5*1 = 3.5
    adv, _ = gae(rewards, torch.zeros(2, 4), mask, gamma=0.5, lam=1.0)
    torch.testing.assert_close(adv, torch.tensor([[1.5, 0, 1, 2], [0, 3.5, 1, 0]]))


def test_gae_with_lam_1_and_zero_values_is_discounted_returns() -> None:
    gen = torch.Generator().manual_seed(0)
    rewards = torch.randn(3, 9, generator=gen)
    mask = torch.rand(3, 9, generator=gen) > 0.4
    adv, _ = gae(rewards, torch.zeros(3, 9), mask, gamma=0.95, lam=1.0)
    torch.testing.assert_close(adv, discounted_returns(rewards, mask, 0.95))


def test_gae_does_not_track_grad() -> None:
    values = torch.zeros(1, 2, requires_grad=True)
    adv, ret = gae(torch.ones(1, 2), values, torch.ones(1, 2))
    assert not adv.requires_grad and not ret.requires_grad


finite = st.floats(-5, 5, allow_nan=False, width=32)
junk = st.one_of(finite, st.just(math.nan), st.just(math.inf))


@given(
    agent=st.lists(st.tuples(finite, finite, st.floats(0, 1, width=32)), min_size=1, max_size=8),
    gaps=st.lists(st.lists(st.tuples(junk, junk, junk), max_size=3), min_size=9, max_size=9),
    lam=st.floats(0, 1),
)
def test_gae_is_invariant_to_inserted_non_agent_tokens(
    agent: list[tuple[float, float, float]],
    gaps: list[list[tuple[float, float, float]]],
    lam: float,
) -> None:
    # Interleave junk mask-0 tokens (any reward, value, gamma, even NaN) before each agent token
    # and after the last one; agent-token advantages must not move.
    rows: list[tuple[float, float, float, bool]] = []
    for i, tok in enumerate(agent):
        rows += [(*j, False) for j in gaps[i]]
        rows.append((*tok, True))
    rows += [(*j, False) for j in gaps[len(agent)]]
    r, v, g, m = (torch.tensor([x[k] for x in rows])[None] for k in range(4))
    compact_r, compact_v, compact_g = (torch.tensor([x[k] for x in agent])[None] for k in range(3))
    ones = torch.ones_like(compact_r, dtype=torch.bool)
    want, want_ret = gae(compact_r, compact_v, ones, gamma=compact_g, lam=lam)
    got, got_ret = gae(r, v, m, gamma=g, lam=lam)
    torch.testing.assert_close(got[m][None], want, rtol=0, atol=1e-6)
    torch.testing.assert_close(got_ret[m][None], want_ret, rtol=0, atol=1e-6)
    assert (got[~m] == 0).all() and (got_ret[~m] == 0).all()


def test_time_aware_discounts() -> None:
    assert time_aware_discounts([0.0, 1.0, 10.0], 0.1) == pytest.approx(
        [1.0, math.exp(-0.1), math.exp(-1.0)]
    )
    assert time_aware_discounts([3.0], 0.0) == [1.0]
    with pytest.raises(ValueError, match="rate"):
        time_aware_discounts([1.0], -0.5)
    with pytest.raises(ValueError, match="durations"):
        time_aware_discounts([1.0, -2.0], 0.5)


# ---------------------------------------------------------------- whiten


def test_whiten_uses_masked_stats_only() -> None:
    x = t(1, 3, 1000, math.nan)
    mask = flags(1, 1, 0, 0)
    # masked mean 2, population var 1
    out = whiten(x, mask, eps=0.0)
    assert out.tolist() == [-1.0, 1.0, 0.0, 0.0]
    out = whiten(x, mask, shift_mean=False, eps=0.0)
    assert out.tolist() == [1.0, 3.0, 0.0, 0.0]  # (x - 2) / 1 + 2


def test_whiten_singleton_returns_masked_input() -> None:
    out = whiten(t(5, math.nan), flags(1, 0))
    assert out.tolist() == [5.0, 0.0]
    assert whiten(t(5, 6), flags(0, 0)).tolist() == [0.0, 0.0]
