"""RL algorithms of the reference trainer.

The pure functions (``advantages``, ``losses``, ``offpolicy``) touch no model and no env;
everything there is tested by hand. On them, one module per algorithm family turns a
rollout batch into advantages: ``group`` (GRPO, RLOO), ``reinforce``, ``ppo`` and ``sft``,
each an :class:`~agentgym_trainers.algorithms.base.Algorithm` that
:mod:`~agentgym_trainers.algorithms.registry` maps from the ``algo`` name.
"""

from agentgym_trainers.algorithms.advantages import (
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
from agentgym_trainers.algorithms.losses import (
    KL_ESTIMATORS,
    STAT_KEYS,
    entropy_from_logits,
    kl_estimate,
    kl_k3,
    masked_token_sum,
    policy_loss,
    step_loss,
    value_loss,
)
from agentgym_trainers.algorithms.offpolicy import lag_keep_mask, truncated_is_weights
from agentgym_trainers.config import LossConfig  # step_loss's config: the run's objective group

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
