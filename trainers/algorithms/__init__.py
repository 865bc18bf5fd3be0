"""Pure-function RL algorithms of the reference trainer: advantages, losses and off-policy
corrections. Nothing here touches a model or an env; everything is tested by hand."""

from trainers.algorithms.advantages import (
    RunningBaseline,
    discounted_returns,
    gae,
    grpo_advantages,
    reinforce_advantages,
    rloo_advantages,
    time_aware_discounts,
    whiten,
    whiten_with,
    zero_variance_groups,
)
from trainers.algorithms.losses import (
    KL_ESTIMATORS,
    STAT_KEYS,
    LossConfig,
    entropy_from_logits,
    kl_estimate,
    kl_k3,
    masked_token_sum,
    policy_loss,
    step_loss,
    value_loss,
)
from trainers.algorithms.offpolicy import lag_keep_mask, truncated_is_weights

__all__ = [
    "KL_ESTIMATORS",
    "STAT_KEYS",
    "LossConfig",
    "RunningBaseline",
    "discounted_returns",
    "entropy_from_logits",
    "gae",
    "grpo_advantages",
    "kl_estimate",
    "kl_k3",
    "lag_keep_mask",
    "masked_token_sum",
    "policy_loss",
    "reinforce_advantages",
    "rloo_advantages",
    "step_loss",
    "time_aware_discounts",
    "truncated_is_weights",
    "value_loss",
    "whiten",
    "whiten_with",
    "zero_variance_groups",
]
