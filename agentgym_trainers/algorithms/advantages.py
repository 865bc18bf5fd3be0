"""Advantage estimators: GRPO, RLOO, REINFORCE with a running baseline, and token-level GAE.

Every function here is pure torch over plain tensors: no model, no env. Conventions:

* Episode-level estimators take ``rewards`` ``(N,)`` float, ``group_ids`` ``(N,)`` int64 (the
  episodes sampled for the same task share an id) and ``valid`` ``(N,)`` bool. ``valid`` is
  False for an env-error episode: it gets advantage exactly 0, is not kept, and never enters a
  statistic (its reward may even be NaN).
* They return ``(advantages, kept)``; ``kept`` False means "leave this episode out of the loss".
* Token-level functions take ``(B, T)`` tensors and a ``mask`` of agent (sampled) tokens;
  everything at mask-0 positions is ignored and comes back 0.

Bad hyperparameters raise :class:`ConfigError` (a ``ValueError``); tensors of the wrong shape
raise ``ValueError``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import torch
from torch import Tensor

from agentgym_envs.core.errors import ConfigError


@dataclass(frozen=True)
class _GroupStats:
    """Per-episode view of its group's statistics over valid members (all ``(N,)``)."""

    count: Tensor  # number of valid members in the group
    total: Tensor  # sum of their rewards (float64)
    mean: Tensor  # population mean (float64)
    std: Tensor  # population std, unbiased=False (float64)
    constant: Tensor  # bool: all valid rewards of the group are equal
    kept: Tensor  # bool: valid and the group has >= 2 valid members


def _check_episodes(rewards: Tensor, group_ids: Tensor | None, valid: Tensor) -> None:
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D (N,), got shape {tuple(rewards.shape)}")
    if valid.dtype != torch.bool or valid.shape != rewards.shape:
        raise ValueError(
            f"valid must be a bool tensor of shape {tuple(rewards.shape)}, got "
            f"{valid.dtype} {tuple(valid.shape)}"
        )
    if group_ids is not None and (
        group_ids.shape != rewards.shape or group_ids.is_floating_point()
    ):
        raise ValueError(
            f"group_ids must be an integer tensor of shape {tuple(rewards.shape)}, got "
            f"{group_ids.dtype} {tuple(group_ids.shape)}"
        )


def _group_stats(rewards: Tensor, group_ids: Tensor, valid: Tensor) -> _GroupStats:
    """Statistics of each episode's group, computed over the VALID members only."""
    _check_episodes(rewards, group_ids, valid)
    n = rewards.shape[0]
    # 1. Map arbitrary ids onto 0..G-1 so per-group sums are one index_add each.
    _, inverse = torch.unique(group_ids, return_inverse=True)  # (N,)
    n_groups = int(inverse.max().item()) + 1 if n else 0
    # 2. Float64 sums: a group mean must not drift with the group size.
    r = torch.where(valid, rewards.detach().double(), 0.0)  # (N,) invalid (maybe NaN) -> 0
    zeros = torch.zeros(n_groups, dtype=torch.float64, device=rewards.device)
    count = zeros.index_add(0, inverse, valid.double())  # (G,)
    total = zeros.index_add(0, inverse, r)  # (G,)
    mean = total / count.clamp(min=1.0)  # (G,)
    dev = torch.where(valid, r - mean[inverse], 0.0)  # (N,)
    std = (zeros.index_add(0, inverse, dev * dev) / count.clamp(min=1.0)).sqrt()  # (G,)
    # 3. "All equal" is decided by min == max, not std == 0, so it is exact in floating point.
    high = torch.where(valid, r, -math.inf)
    low = torch.where(valid, r, math.inf)
    g_max = zeros.scatter_reduce(0, inverse, high, "amax", include_self=False)  # (G,)
    g_min = zeros.scatter_reduce(0, inverse, low, "amin", include_self=False)  # (G,)
    kept = valid & (count[inverse] >= 2)
    return _GroupStats(
        count=count[inverse],
        total=total[inverse],
        mean=mean[inverse],
        std=std[inverse],
        constant=(g_max == g_min)[inverse],
        kept=kept,
    )


def grpo_advantages(
    rewards: Tensor,
    group_ids: Tensor,
    valid: Tensor,
    *,
    scale: Literal["std", "none"] = "std",
    eps: float = 1e-6,
) -> tuple[Tensor, Tensor]:
    """Group-relative advantages (GRPO).

    Each episode's reward is compared with the mean of its group; mean and std are taken over
    the group's valid members, and the std is the population std (``unbiased=False``), so a
    group of two rewards ``{0, 1}`` has std 0.5.

    Args:
        rewards: ``(N,)`` float episode returns.
        group_ids: ``(N,)`` int64 group of each episode (any values, need not be contiguous).
        valid: ``(N,)`` bool, False for env-error episodes.
        scale: ``"std"`` gives ``(r - mean) / (std + eps)``; ``"none"`` gives ``r - mean``
            (Dr. GRPO, which avoids up-weighting near-constant groups).
        eps: added to the std so a near-constant group does not explode.

    Returns:
        ``(advantages, kept)``, both ``(N,)``. A group with fewer than 2 valid members is
        dropped (kept False for all of it); invalid members are not kept and get 0. A group
        whose valid rewards are all equal gets exactly 0 and stays kept (it carries no signal
        but counts towards the token normaliser, as in GRPO).
    """
    if scale not in ("std", "none"):
        raise ConfigError(f"scale must be 'std' or 'none', got {scale!r}")
    if eps < 0:
        raise ConfigError(f"eps must be >= 0, got {eps}")
    s = _group_stats(rewards, group_ids, valid)
    centred = rewards.detach().double() - s.mean  # (N,)
    adv = centred / (s.std + eps) if scale == "std" else centred
    adv = torch.where(s.kept & ~s.constant, adv, 0.0)
    return adv.to(rewards.dtype), s.kept


def rloo_advantages(rewards: Tensor, group_ids: Tensor, valid: Tensor) -> tuple[Tensor, Tensor]:
    """Leave-one-out advantages (RLOO).

    ``A_i = r_i - mean_{j != i} r_j`` over the valid members ``j`` of ``i``'s group: the
    baseline never sees the episode it judges, so the estimate stays unbiased.

    Args:
        rewards: ``(N,)`` float episode returns.
        group_ids: ``(N,)`` int64 group of each episode.
        valid: ``(N,)`` bool, False for env-error episodes.

    Returns:
        ``(advantages, kept)``, both ``(N,)``, with the keep rule of :func:`grpo_advantages`;
        a group whose valid rewards are all equal gets exactly 0.
    """
    s = _group_stats(rewards, group_ids, valid)
    r = rewards.detach().double()
    others = (s.total - torch.where(valid, r, 0.0)) / (s.count - 1).clamp(min=1.0)  # (N,)
    adv = torch.where(s.kept & ~s.constant, r - others, 0.0)
    return adv.to(rewards.dtype), s.kept


def zero_variance_groups(rewards: Tensor, group_ids: Tensor, valid: Tensor) -> tuple[int, int]:
    """Count the kept groups that carry no learning signal.

    Returns:
        ``(number of kept groups whose valid rewards are all equal, number of kept groups)``.
    """
    s = _group_stats(rewards, group_ids, valid)
    kept_ids = torch.unique(group_ids[s.kept])
    constant_ids = torch.unique(group_ids[s.kept & s.constant])
    return int(constant_ids.numel()), int(kept_ids.numel())


def reinforce_advantages(rewards: Tensor, valid: Tensor, baseline: float) -> tuple[Tensor, Tensor]:
    """REINFORCE advantages ``r - baseline``; invalid episodes get 0 and are not kept.

    Returns:
        ``(advantages, kept)``, both ``(N,)``.
    """
    _check_episodes(rewards, None, valid)
    adv = torch.where(valid, rewards.detach() - baseline, 0.0)
    return adv, valid.clone()


class RunningBaseline:
    """REINFORCE baseline: an exponential moving average of each batch's mean valid reward.

    Use :meth:`advantages` with the current value, then :meth:`update` with the same batch,
    so a batch is never judged against a baseline that already contains it.

    Attributes:
        decay: weight of the old value, in ``[0, 1)``.
        value: the baseline, ``None`` before the first update (the first update sets it to
            that batch's mean rather than decaying from 0, which would bias early batches).
    """

    def __init__(self, decay: float = 0.9) -> None:
        if not 0.0 <= decay < 1.0:
            raise ConfigError(f"RunningBaseline decay must be in [0, 1), got {decay}")
        self.decay = float(decay)
        self.value: float | None = None

    def advantages(self, rewards: Tensor, valid: Tensor) -> tuple[Tensor, Tensor]:
        """``r - value`` (0.0 before the first update) for valid episodes; see
        :func:`reinforce_advantages`."""
        return reinforce_advantages(rewards, valid, 0.0 if self.value is None else self.value)

    def update(self, rewards: Tensor, valid: Tensor) -> None:
        """Fold the mean valid reward of one batch into the baseline.

        A batch without a valid episode leaves the baseline unchanged.
        """
        _check_episodes(rewards, None, valid)
        if not bool(valid.any()):
            return
        batch_mean = float(rewards.detach()[valid].double().mean())
        if self.value is None:
            self.value = batch_mean
        else:
            self.value = self.decay * self.value + (1.0 - self.decay) * batch_mean

    def state_dict(self) -> dict[str, float | None]:
        """Plain floats for a checkpoint."""
        return {"decay": self.decay, "value": self.value}

    def load_state_dict(self, state: dict[str, float | None]) -> None:
        """Restore what :meth:`state_dict` returned."""
        decay, value = state["decay"], state["value"]
        if decay is None or not 0.0 <= decay < 1.0:
            raise ConfigError(f"RunningBaseline state: decay must be in [0, 1), got {decay}")
        self.decay = float(decay)
        self.value = None if value is None else float(value)


@torch.no_grad()
def gae(
    rewards: Tensor,
    values: Tensor,
    mask: Tensor,
    *,
    gamma: float | Tensor = 1.0,
    lam: float = 1.0,
    bootstrap: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Generalized advantage estimation over agent tokens only.

    Mask-0 tokens (observation, template, padding) are skipped entirely: for an agent token
    ``t``, "next" is the next agent token of the same row, and rewards, values and gammas at
    mask-0 positions are ignored (they may hold anything, NaN included). The last agent token
    of a row bootstraps with ``bootstrap[b]``: 0 for an episode that terminated, the
    critic's value of the state after the last action for one a time or context limit cut
    (truncation is not termination)::

        delta_t   = r_t + gamma_t * V_next - V_t
        A_t       = delta_t + gamma_t * lam * A_next
        returns_t = A_t + V_t

    Args:
        rewards: ``(B, T)`` float, the reward credited to each agent token.
        values: ``(B, T)`` float value estimates.
        mask: ``(B, T)`` bool or 0/1, 1 = agent (sampled) token.
        gamma: a float, or a ``(B, T)`` tensor whose ``[b, t]`` is the discount from agent
            token ``t`` to the next agent token (per-turn or time-aware discounting; tokens
            inside one action normally get 1.0).
        lam: the GAE lambda.
        bootstrap: ``(B,)`` value after each row's last agent token (default 0: terminal).

    Returns:
        ``(advantages, returns)``, both ``(B, T)`` in ``rewards.dtype``, exactly 0 at mask-0
        positions. Inputs are detached; nothing here carries gradient.
    """
    if rewards.dim() != 2 or values.shape != rewards.shape or mask.shape != rewards.shape:
        raise ValueError(
            "rewards, values and mask must share one (B, T) shape, got "
            f"{tuple(rewards.shape)}, {tuple(values.shape)}, {tuple(mask.shape)}"
        )
    g = torch.as_tensor(gamma, dtype=rewards.dtype, device=rewards.device).expand_as(rewards)
    m = mask.bool()  # (B, T)
    batch, steps = rewards.shape
    # 1. The carry holds V and A of the next agent token of each row (0 = terminal).
    next_value = torch.zeros(batch, dtype=rewards.dtype, device=rewards.device)  # (B,)
    if bootstrap is not None:
        if bootstrap.shape != (batch,):
            raise ValueError(f"bootstrap must have shape ({batch},), got {tuple(bootstrap.shape)}")
        next_value = bootstrap.detach().to(rewards.dtype).clone()
    next_adv = torch.zeros_like(next_value)  # (B,)
    adv = torch.zeros_like(rewards)  # (B, T)
    for t in reversed(range(steps)):
        m_t = m[:, t]
        # 2. Mask-0 inputs are replaced before use, so NaN there cannot reach the carry.
        r_t = torch.where(m_t, rewards[:, t], 0.0)
        v_t = torch.where(m_t, values[:, t], 0.0)
        g_t = torch.where(m_t, g[:, t], 0.0)
        delta = r_t + g_t * next_value - v_t
        a_t = delta + g_t * lam * next_adv
        adv[:, t] = torch.where(m_t, a_t, 0.0)
        # 3. Only agent tokens move the carry: mask-0 tokens are invisible to their neighbours.
        next_value = torch.where(m_t, v_t, next_value)
        next_adv = torch.where(m_t, a_t, next_adv)
    returns = torch.where(m, adv + torch.where(m, values, 0.0), 0.0)
    return adv, returns


def discounted_returns(rewards: Tensor, mask: Tensor, gamma: float | Tensor = 1.0) -> Tensor:
    """Return-to-go over agent tokens, skipping mask-0 tokens as :func:`gae` does.

    Equal to ``gae(rewards, zeros, mask, gamma=gamma, lam=1.0)`` advantages; ``(B, T)``.
    """
    adv, _ = gae(rewards, torch.zeros_like(rewards), mask, gamma=gamma, lam=1.0)
    return adv


def time_aware_discounts(durations_s: Sequence[float], rate: float) -> list[float]:
    """Per-turn discounts ``gamma_t = exp(-rate * dt_t)`` from turn durations.

    A slow turn (a long tool call, a long wait) discounts the future more than a quick one.

    Args:
        durations_s: wall-clock duration of each turn in seconds, each ``>= 0``.
        rate: the decay rate per second (``lambda``), finite and ``>= 0``.

    Returns:
        One discount in ``(0, 1]`` per turn.
    """
    if not (math.isfinite(rate) and rate >= 0):
        raise ConfigError(f"time_aware_discounts: rate must be a finite number >= 0, got {rate}")
    bad = [(i, d) for i, d in enumerate(durations_s) if not (math.isfinite(d) and d >= 0)]
    if bad:
        raise ValueError(
            f"time_aware_discounts: durations must be finite seconds >= 0, got (index, value) "
            f"{bad[:5]}; check the turn timestamps"
        )
    return [math.exp(-rate * d) for d in durations_s]


def whiten(x: Tensor, mask: Tensor, *, shift_mean: bool = True, eps: float = 1e-8) -> Tensor:
    """Masked whitening: ``(x - mean) / sqrt(var + eps)`` with stats over ``mask == 1`` only.

    The variance is the population variance (``unbiased=False``), as in
    :func:`grpo_advantages`.

    Args:
        x: any shape.
        mask: same shape, bool or 0/1.
        shift_mean: False adds the mean back (scale only), keeping the sign of ``x``.
        eps: added to the variance.

    Returns:
        Same shape as ``x``; mask-0 entries are 0. With fewer than 2 masked entries there is
        no spread to divide by, so ``x`` comes back masked but otherwise unchanged.
    """
    if mask.shape != x.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} != x shape {tuple(x.shape)}")
    m = mask.bool()
    xm = torch.where(m, x, 0.0)
    n = m.sum()
    if int(n) < 2:
        return xm
    mean = xm.sum() / n
    var = torch.where(m, (x - mean) ** 2, 0.0).sum() / n
    out = (x - mean) * torch.rsqrt(var + eps)
    if not shift_mean:
        out = out + mean
    return torch.where(m, out, 0.0)


def whiten_with(
    x: Tensor,
    mask: Tensor,
    count: float,
    total: float,
    squares: float,
    *,
    shift_mean: bool = True,
    eps: float = 1e-8,
) -> Tensor:
    """Whiten ``x`` with statistics gathered elsewhere (e.g. summed over processes).

    ``count``, ``total`` and ``squares`` are the number, sum and sum of squares of the
    masked entries of the whole batch. ``shift_mean=False`` only divides by the standard
    deviation, so an exact 0 stays 0 (a GRPO/RLOO group without signal keeps none).

    Returns:
        Same shape as ``x``; mask-0 entries are 0. With fewer than 2 entries in all, ``x``
        comes back masked but otherwise unchanged.
    """
    if mask.shape != x.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} != x shape {tuple(x.shape)}")
    m = mask.bool()
    if count < 2:
        return torch.where(m, x, 0.0)
    mean = total / count
    var = max(squares / count - mean * mean, 0.0)
    out = (x - mean if shift_mean else x) / math.sqrt(var + eps)
    return torch.where(m, out, 0.0)
