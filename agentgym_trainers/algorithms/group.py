"""Group-relative algorithms: GRPO and RLOO.

Every task of a step is played ``group_size`` times from the same env seed; an episode's
advantage is its return measured against its own group, so no critic is needed.

1. episode returns ``(N,)``, validity and group ids of the batch;
2. the group baseline: GRPO subtracts the group mean (and divides by its std), RLOO the
   mean of the *other* members; a group with fewer than 2 valid members is dropped;
3. every agent token of a kept episode carries its episode's advantage; with
   ``--branch``, a branched turn's tokens carry their branch point's instead, and the
   branches add their sequences (:mod:`agentgym_trainers.branching`);
4. ``kl_in_reward``: each token's KL penalty is subtracted from its advantage (after the
   baseline, so the penalty is not averaged away within the group);
5. ``whiten``: scale only, since the baseline already centres the advantages;
6. ``tool_credit``: the tokens of the part of a turn the env rejected (a wrong tool name,
   a wrong argument) lose that much advantage, last, so no other token's moves
   (:mod:`agentgym_trainers.tool_credit`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence

import torch

from agentgym_envs.rollout.episodes import Trajectory
from agentgym_trainers import distributed as dist
from agentgym_trainers.algorithms.advantages import (
    grpo_advantages,
    rloo_advantages,
    zero_variance_groups,
)
from agentgym_trainers.algorithms.base import (
    Algorithm,
    broadcast,
    charge_kl,
    episode_batch,
    kept_rate,
    whiten_tokens,
)
from agentgym_trainers.batch import TrainSeq
from agentgym_trainers.branching import branch_credit
from agentgym_trainers.tool_credit import tool_credit


class GroupRelative(Algorithm):
    """Advantages relative to the episode's group (steps 1-5 of the module docstring)."""

    @abstractmethod
    def baseline(
        self, returns: torch.Tensor, groups: torch.Tensor, valid: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(advantages, kept)``, both ``(N,)``, from ``(N,)`` returns, groups, validity."""

    def advantages(self, trajs: Sequence[Trajectory]) -> tuple[list[TrainSeq], dict[str, float]]:
        cfg, device = self.cfg, self.learner.device
        # 1. episodes: returns (N,), valid (N,), groups (N,), and their sequences
        batch = episode_batch(trajs, cfg)
        # 2. the group baseline; groups whose valid returns are all equal carry no signal
        adv, kept = self.baseline(batch.returns, batch.groups, batch.valid)  # (N,), (N,)
        zero, n_groups = zero_variance_groups(batch.returns, batch.groups, batch.valid)
        z = dist.all_sum([zero, n_groups], device)
        stats = {"zero_variance_group_rate": z[0] / max(z[1], 1.0)}
        # 3. episode advantage -> every agent token of the episode (a branched turn: its
        # branch point's advantage)
        seqs = broadcast(batch.seqs, adv, kept)
        seqs, branched = branch_credit(trajs, seqs, cfg, device)
        stats.update(branched)
        # 4. the KL penalty per token, after the baseline
        stats.update(charge_kl(self.learner, cfg, seqs, into="advantages"))
        # 5. whitening scales only (the baseline already centred the advantages)
        if cfg.advantage.whiten:
            whiten_tokens(seqs, device, shift_mean=False)
        # 6. the rejected parts of turns lose credit
        stats.update(tool_credit(trajs, seqs, cfg, self.learner.decode, device))
        stats.update(kept_rate(kept, device))
        return seqs, stats


class GRPO(GroupRelative):
    """GRPO: ``(r - mean) / (std + eps)`` over the group's valid members (``adv_scale``
    ``none``: only ``r - mean``, as Dr. GRPO)."""

    name = "grpo"

    def baseline(
        self, returns: torch.Tensor, groups: torch.Tensor, valid: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return grpo_advantages(returns, groups, valid, scale=self.cfg.advantage.adv_scale)


class RLOO(GroupRelative):
    """RLOO: ``r_i - mean_{j != i} r_j`` over the valid members of the group."""

    name = "rloo"

    def baseline(
        self, returns: torch.Tensor, groups: torch.Tensor, valid: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        return rloo_advantages(returns, groups, valid)
