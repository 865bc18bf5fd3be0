"""SFT: imitation of oracle episodes (the warm start, or the whole run with ``algo sft``).

Imitation is the policy gradient with advantage 1 on every agent token: the token-mean
NLL that :func:`agentgym_trainers.run.sft` minimises. There are no RL steps and no critic.

1. the valid episodes' sequences (the oracle's actions are their agent tokens);
2. advantage 1 on every agent token, 0 elsewhere.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from agentgym_envs.rollout.episodes import Trajectory
from agentgym_trainers.algorithms.base import Algorithm, broadcast, episode_batch
from agentgym_trainers.batch import TrainSeq


class SFT(Algorithm):
    """Oracle imitation (steps 1-2 of the module docstring)."""

    name = "sft"

    def advantages(self, trajs: Sequence[Trajectory]) -> tuple[list[TrainSeq], dict[str, float]]:
        # 1. episodes: every valid one is imitated
        batch = episode_batch(trajs, self.cfg)
        # 2. advantage 1 on every agent token
        seqs = broadcast(batch.seqs, torch.ones_like(batch.returns), batch.valid)
        return seqs, {}
