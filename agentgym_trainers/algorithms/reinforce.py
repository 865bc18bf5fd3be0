"""REINFORCE with a running baseline.

Each episode is judged against an exponential moving average of earlier batches' mean
return, so no group and no critic are needed.

1. episode returns ``(N,)`` and validity of the batch;
2. advantages ``r - baseline`` with the baseline *before* this batch, then the baseline
   takes in this batch's mean valid return over every process;
3. every agent token of a valid episode carries its episode's advantage; with
   ``--branch``, a branched turn's tokens carry their branch point's instead, and the
   branches add their sequences (:mod:`agentgym_trainers.branching`);
4. ``kl_in_reward``: each token's KL penalty is subtracted from its advantage;
5. ``whiten``: shift and scale over every process's agent tokens;
6. ``tool_credit``: the tokens of the part of a turn the env rejected lose that much
   advantage, last, so no other token's moves (:mod:`agentgym_trainers.tool_credit`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from agentgym_envs.rollout.episodes import Trajectory
from agentgym_trainers import distributed as dist
from agentgym_trainers.algorithms.advantages import RunningBaseline
from agentgym_trainers.algorithms.base import (
    Algorithm,
    Learner,
    broadcast,
    charge_kl,
    episode_batch,
    kept_rate,
    whiten_tokens,
)
from agentgym_trainers.batch import TrainSeq
from agentgym_trainers.branching import branch_credit
from agentgym_trainers.config import TrainConfig
from agentgym_trainers.tool_credit import tool_credit


class Reinforce(Algorithm):
    """REINFORCE (steps 1-5 of the module docstring); the baseline is checkpointed."""

    name = "reinforce"

    def __init__(self, cfg: TrainConfig, learner: Learner) -> None:
        super().__init__(cfg, learner)
        self.baseline = RunningBaseline(cfg.advantage.baseline_decay)

    def advantages(self, trajs: Sequence[Trajectory]) -> tuple[list[TrainSeq], dict[str, float]]:
        cfg, device = self.cfg, self.learner.device
        # 1. episodes: returns (N,), valid (N,), and their sequences
        batch = episode_batch(trajs, cfg)
        # 2. judge against the old baseline, then fold in every process's valid returns
        adv, kept = self.baseline.advantages(batch.returns, batch.valid)  # (N,), (N,)
        mine = list(zip(batch.returns.tolist(), batch.valid.tolist(), strict=True))
        everyone = [pair for part in dist.all_gather(mine) for pair in part]
        self.baseline.update(
            torch.tensor([r for r, _ in everyone]), torch.tensor([v for _, v in everyone])
        )
        stats = {"baseline": float(self.baseline.value or 0.0)}
        # 3. episode advantage -> every agent token of the episode (a branched turn: its
        # branch point's advantage)
        seqs = broadcast(batch.seqs, adv, kept)
        seqs, branched = branch_credit(trajs, seqs, cfg, device)
        stats.update(branched)
        # 4. the KL penalty per token
        stats.update(charge_kl(self.learner, cfg, seqs, into="advantages"))
        # 5. whitening shifts and scales
        if cfg.advantage.whiten:
            whiten_tokens(seqs, device, shift_mean=True)
        # 6. the rejected parts of turns lose credit
        stats.update(tool_credit(trajs, seqs, cfg, self.learner.decode, device))
        stats.update(kept_rate(kept, device))
        return seqs, stats

    def state_dict(self) -> dict[str, Any]:
        return dict(self.baseline.state_dict())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.baseline.load_state_dict(state)
