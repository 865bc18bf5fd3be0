"""Per-token PPO-family losses and the micro-batch step loss.

All per-token functions take and return ``(B, T)`` tensors (any matching shape works). The
only function that knows about masks and normalisation is :func:`step_loss`: it divides by
the number of agent tokens of the whole optimizer step, so the gradient is the token mean
however the step is split into micro-batches and ranks.
"""

from __future__ import annotations

import typing

import torch
from torch import Tensor

from agentgym_envs.core.errors import ConfigError
from agentgym_trainers.config import KLEstimator, LossConfig

STAT_KEYS = ("pg_loss", "kl", "entropy", "clipped", "ratio", "vf_loss", "approx_kl", "tokens")
KL_ESTIMATORS: tuple[str, ...] = typing.get_args(KLEstimator)


def kl_k3(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Per-token k3 estimator of ``KL(pi || ref)``: ``exp(d) - d - 1`` with ``d = ref - logp``.

    Unbiased for tokens sampled from ``pi`` and never negative. ``expm1`` keeps it accurate
    when ``d`` is tiny, and the clamp removes the last-ulp negatives rounding can leave.
    """
    d = ref_logprobs - logprobs
    return (torch.expm1(d) - d).clamp(min=0.0)


def kl_estimate(logprobs: Tensor, ref_logprobs: Tensor, estimator: str = "k3") -> Tensor:
    """Per-token estimate of ``KL(pi || ref)`` from tokens sampled by ``pi``.

    ``k1 = logp - ref`` (unbiased, noisy, negative on some tokens), ``k2 = (logp - ref)^2 / 2``
    (biased, low variance; its gradient is the KL's for small differences) and ``k3`` (see
    :func:`kl_k3`), in the naming of Schulman's note on KL approximations.
    """
    if estimator == "k3":
        return kl_k3(logprobs, ref_logprobs)
    d = logprobs - ref_logprobs
    if estimator == "k1":
        return d
    if estimator == "k2":
        return 0.5 * d * d
    raise ConfigError(f"kl estimator must be one of {KL_ESTIMATORS}, got {estimator!r}")


def entropy_from_logits(logits: Tensor) -> Tensor:
    """``(..., V)`` logits -> ``(...)`` entropy of the softmax.

    Uses ``log_softmax`` for stability; ``-inf`` logits (banned tokens) contribute 0 and no
    NaN gradient, because their log-probability is clamped to the dtype's minimum first.
    """
    logp = torch.log_softmax(logits, dim=-1)
    logp_finite = logp.clamp(min=torch.finfo(logp.dtype).min)
    return -(logp.exp() * logp_finite).sum(dim=-1)


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    *,
    clip_low: float,
    clip_high: float,
    dual_clip: float | None = None,
    is_weights: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Per-token clipped surrogate loss, to minimise.

    ``loss = max(-A * ratio, -A * clip(ratio, 1 - clip_low, 1 + clip_high))`` with
    ``ratio = exp(logprobs - old_logprobs)``; with ``dual_clip = c`` the loss of a token with
    ``A < 0`` is further capped at ``-c * A``.

    Args:
        logprobs: ``(B, T)`` log-probabilities under the policy being trained (with grad).
        old_logprobs: ``(B, T)`` log-probabilities under the policy that made the batch.
        advantages: ``(B, T)``.
        clip_low: see :class:`LossConfig`.
        clip_high: see :class:`LossConfig`.
        dual_clip: see :class:`LossConfig`.
        is_weights: ``(B, T)`` truncated importance weights multiplying the loss (detached
            here), for rollouts sampled by a lagging engine; see ``offpolicy``.

    Returns:
        ``(loss, clipped)``, both ``(B, T)``; ``clipped`` is True where the clipped term was
        strictly larger than the unclipped one, i.e. where the token gets no gradient.
    """
    adv = advantages.detach()
    ratio = torch.exp(logprobs - old_logprobs.detach())  # (B, T)
    unclipped = -adv * ratio
    clipped_term = -adv * ratio.clamp(1.0 - clip_low, 1.0 + clip_high)
    clipped = clipped_term > unclipped
    # where, not maximum: maximum splits the gradient on ties; this is the textbook gradient.
    loss = torch.where(clipped, clipped_term, unclipped)
    if dual_clip is not None:
        cap = -dual_clip * adv
        loss = torch.where((adv < 0) & (loss > cap), cap, loss)
    if is_weights is not None:
        loss = loss * is_weights.detach()
    return loss, clipped


def value_loss(values: Tensor, old_values: Tensor, returns: Tensor, clip: float | None) -> Tensor:
    """Per-token ``0.5 * max((v - R)^2, (clip(v, old - clip, old + clip) - R)^2)``.

    With ``clip=None`` it is the plain ``0.5 * (v - R)^2``.
    """
    returns = returns.detach()
    plain = (values - returns) ** 2
    if clip is None:
        return 0.5 * plain
    old = old_values.detach()
    v_clipped = torch.minimum(torch.maximum(values, old - clip), old + clip)
    return 0.5 * torch.maximum(plain, (v_clipped - returns) ** 2)


def masked_token_sum(x: Tensor, mask: Tensor) -> Tensor:
    """Sum of ``x`` over ``mask != 0`` entries (a 0-dim tensor); NaN outside the mask is
    ignored."""
    return torch.where(mask.bool(), x, 0.0).sum()


def step_loss(
    *,
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    n_tokens: float,
    config: LossConfig,
    ref_logprobs: Tensor | None = None,
    entropy: Tensor | None = None,
    values: Tensor | None = None,
    old_values: Tensor | None = None,
    returns: Tensor | None = None,
    is_weights: Tensor | None = None,
    token_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Loss of one micro-batch, normalised by the agent tokens of the whole optimizer step.

    ``loss = [sum(pg) + kl_coef * sum(kl) - entropy_coef * sum(ent) + vf_coef * sum(vf)]
    / n_tokens``, every sum over agent tokens. Because ``n_tokens`` counts all micro-batches
    on all ranks, summing the micro-batch gradients gives the token-mean gradient whatever
    the split. Terms whose inputs are None are left out.

    Args:
        logprobs: ``(B, T)`` policy log-probabilities, with grad.
        old_logprobs: ``(B, T)`` log-probabilities of the policy that made the batch.
        advantages: ``(B, T)`` per-token advantages.
        mask: ``(B, T)`` bool or 0/1, nonzero = agent token. Every other position gets exactly
            0 gradient, even if it holds NaN or inf.
        n_tokens: number of agent tokens in the whole optimizer step, ``> 0``.
        config: coefficients and clipping ranges.
        ref_logprobs: ``(B, T)`` reference log-probabilities, for the KL term.
        entropy: ``(B, T)`` per-token entropy (with grad), for the entropy bonus.
        values: ``(B, T)`` value predictions (with grad), for the value loss; needs
            ``returns``, and ``old_values`` when ``config.vf_clip`` is set.
        old_values: ``(B, T)`` values at rollout time.
        returns: ``(B, T)`` value targets.
        is_weights: ``(B, T)`` truncated importance weights for the policy term.
        token_weights: ``(B, T)`` weight of each token in the policy, KL and entropy terms,
            replacing ``1 / n_tokens`` (sequence-mean or a constant normaliser: see the
            trainer's ``loss_agg``); the value loss stays a token mean.

    Returns:
        ``(loss, stats)``. ``stats`` holds detached SUMS over agent tokens under the keys of
        ``STAT_KEYS`` (absent terms report 0), so the caller can all-reduce and divide by
        ``stats["tokens"]``.
    """
    if not n_tokens > 0:
        raise ValueError(f"n_tokens must be > 0 (agent tokens in the step), got {n_tokens}")
    if values is not None and (
        returns is None or (config.vf_clip is not None and old_values is None)
    ):
        raise ValueError(
            "step_loss: values needs returns, and old_values too when config.vf_clip is set"
        )
    m = mask.bool()  # (B, T)

    def safe(x: Tensor, fill: float = 0.0) -> Tensor:
        # Replacing masked inputs BEFORE any arithmetic is what keeps NaN/inf out of the
        # gradient: a where() only at the end would still backpropagate 0 * NaN = NaN.
        return torch.where(m, x, fill)

    # 1. Clipped policy-gradient term.
    logp = safe(logprobs)
    old = safe(old_logprobs)
    pg, clipped = policy_loss(
        logp,
        old,
        safe(advantages),
        clip_low=config.clip_low,
        clip_high=config.clip_high,
        dual_clip=config.dual_clip,
        is_weights=None if is_weights is None else safe(is_weights, 1.0),
    )
    zero = pg.new_zeros(())
    stats = {key: zero for key in STAT_KEYS}
    w = None if token_weights is None else safe(token_weights.detach())

    def weighted(x: Tensor) -> Tensor:  # the term's share of the loss before / n_tokens
        return masked_token_sum(x if w is None else x * w * n_tokens, m)

    stats["pg_loss"] = masked_token_sum(pg, m)
    total = weighted(pg)
    stats["clipped"] = masked_token_sum(clipped.to(pg.dtype), m)
    stats["ratio"] = masked_token_sum(torch.exp(logp - old), m)
    stats["approx_kl"] = masked_token_sum(kl_k3(logp.detach(), old.detach()), m)
    stats["tokens"] = m.sum().to(pg.dtype)
    # 2. KL penalty to the frozen reference.
    if ref_logprobs is not None:
        per_kl = kl_estimate(logp, safe(ref_logprobs).detach(), config.kl_estimator)
        stats["kl"] = masked_token_sum(per_kl, m)
        total = total + config.kl_coef * weighted(per_kl)
    # 3. Entropy bonus (subtracted: the loss is minimised).
    if entropy is not None:
        stats["entropy"] = masked_token_sum(safe(entropy), m)
        total = total - config.entropy_coef * weighted(safe(entropy))
    # 4. Value loss.
    if values is not None and returns is not None:
        v = safe(values)
        # Without old values vf_clip is None (checked above), so value_loss never reads them.
        old_v = safe(old_values) if old_values is not None else v.detach()
        vf = value_loss(v, old_v, safe(returns), config.vf_clip)
        vf_sum = masked_token_sum(vf, m)
        total = total + config.vf_coef * vf_sum
        stats["vf_loss"] = vf_sum
    return total / n_tokens, {k: v.detach() for k, v in stats.items()}
