"""Lag filtering and truncated importance weights."""

import math

import pytest
import torch

from agentgym_trainers.algorithms import lag_keep_mask, truncated_is_weights


def test_lag_keep_mask() -> None:
    versions = torch.tensor([10, 9, 8, 7, 10])
    assert lag_keep_mask(versions, 10, 2).tolist() == [True, True, True, False, True]
    assert lag_keep_mask(versions, 10, 0).tolist() == [True, False, False, False, True]


def test_lag_keep_mask_rejects_versions_from_the_future() -> None:
    with pytest.raises(ValueError, match="newer than the learner"):
        lag_keep_mask(torch.tensor([3, 5]), 4, 1)
    with pytest.raises(ValueError, match="max_lag"):
        lag_keep_mask(torch.tensor([3]), 4, -1)


def test_truncated_is_weights_are_capped_and_detached() -> None:
    old = torch.tensor([[-1.0, -1.0, -1.0, 0.0]], requires_grad=True)
    mu = torch.tensor([[-1.0, -1.0 - math.log(1.5), -1.0 + math.log(2.0), -200.0]])
    w = truncated_is_weights(old, mu, cap=2.0)
    # exp(old - mu): 1, 1.5, 0.5, exp(200) = inf -> capped at 2
    torch.testing.assert_close(w, torch.tensor([[1.0, 1.5, 0.5, 2.0]]))
    assert not w.requires_grad


def test_truncated_is_weights_cap_must_be_at_least_one() -> None:
    with pytest.raises(ValueError, match="cap"):
        truncated_is_weights(torch.zeros(1), torch.zeros(1), cap=0.5)
