"""PPO: a value head, GAE over agent tokens, and bootstrapping of cut episodes.

The critic reads the same trunk as the policy (:class:`~agentgym_trainers.model.ValueHead`); the
loss adds its clipped value loss (``vf_coef``, ``vf_clip``).

1. episode validity and each segment's per-token rewards (at each turn's last token) and
   discounts (to the next agent token);
2. ``kl_in_reward``: each token's KL penalty is a per-token reward, charged *before* GAE;
3. values of every agent token under the current critic;
4. bootstrap: an episode cut by a time or context limit takes the critic's value of the
   state after its last action; a terminated one takes 0;
5. GAE per trajectory over the stream of its agent tokens (segments in order, observation
   tokens skipped), giving advantages and value targets; the critic's explained variance;
6. ``whiten``: shift and scale over every process's agent tokens;
7. ``tool_credit``: the tokens of the part of a turn the env rejected lose that much
   advantage, last, so no other token's moves (an advantage, not a reward, which GAE
   would spread over the tokens before it; :mod:`agentgym_trainers.tool_credit`).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from agentgym_envs.rollout.episodes import Trajectory
from agentgym_trainers import distributed as dist
from agentgym_trainers.algorithms.advantages import gae
from agentgym_trainers.algorithms.base import (
    Algorithm,
    broadcast,
    charge_kl,
    episode_batch,
    kept_rate,
    whiten_tokens,
)
from agentgym_trainers.batch import TrainSeq
from agentgym_trainers.tool_credit import tool_credit


class PPO(Algorithm):
    """PPO with GAE (steps 1-6 of the module docstring)."""

    name = "ppo"

    def advantages(self, trajs: Sequence[Trajectory]) -> tuple[list[TrainSeq], dict[str, float]]:
        cfg, device = self.cfg, self.learner.device
        # 1. episodes: every valid one is kept; token advantages start at 0
        batch = episode_batch(trajs, cfg)
        kept = batch.valid.clone()  # (N,)
        seqs = broadcast(batch.seqs, torch.zeros_like(batch.returns), kept)
        # 2. the KL penalty is a per-token reward before GAE
        stats = charge_kl(self.learner, cfg, seqs, into="rewards")
        # 3-5. values, bootstrap and GAE
        if seqs:
            stats.update(self.gae(seqs, trajs))
        # 6. whitening shifts and scales
        if cfg.advantage.whiten:
            whiten_tokens(seqs, device, shift_mean=True)
        # 7. the rejected parts of turns lose credit
        stats.update(tool_credit(trajs, seqs, cfg, self.learner.decode, device))
        stats.update(kept_rate(kept, device))
        return seqs, stats

    def gae(self, seqs: list[TrainSeq], trajs: Sequence[Trajectory]) -> dict[str, float]:
        """Steps 3-5: sets ``advantages``, ``returns`` and ``old_values`` of every sequence;
        returns the critic's explained variance and the number of bootstrapped episodes."""
        device = self.learner.device
        # 3. values of every token under the current critic
        values = self.learner.evaluate(seqs, values=True)
        # each trajectory's agent tokens in order: (sequence index, token index)
        streams: dict[int, list[tuple[int, int]]] = {}
        for i, s in enumerate(seqs):
            streams.setdefault(s.traj, []).extend((i, t) for t, m in enumerate(s.mask) if m)
        width = max(len(v) for v in streams.values())
        order = sorted(streams)  # R trajectories, one row each
        # 4. (R,) value of the state after each trajectory's last action
        boot = self.bootstrap_values(seqs, trajs, [streams[t][-1][0] for t in order], order)
        # 5. GAE over (R, W) rows of agent tokens
        r = torch.zeros(len(order), width)  # (R, W) rewards
        v = torch.zeros(len(order), width)  # (R, W) values
        g = torch.ones(len(order), width)  # (R, W) discounts to the next agent token
        m = torch.zeros(len(order), width)  # (R, W) 1 where a token is
        for row, traj in enumerate(order):
            for col, (i, t) in enumerate(streams[traj]):
                r[row, col] = seqs[i].rewards[t]
                v[row, col] = values[i][t]
                g[row, col] = seqs[i].gammas[t]
                m[row, col] = 1.0
        adv, ret = gae(r, v, m, gamma=g, lam=self.cfg.advantage.lam, bootstrap=boot)
        for i, s in enumerate(seqs):
            s.returns = [0.0] * len(s.ids)
            s.old_values = values[i]
        for row, traj in enumerate(order):
            for col, (i, t) in enumerate(streams[traj]):
                seqs[i].advantages[t] = float(adv[row, col])
                seqs[i].returns[t] = float(ret[row, col])
        return {
            "explained_variance": explained_variance(ret[m.bool()], v[m.bool()], device),
            "bootstrapped_episodes": float(sum(1 for x in boot.tolist() if x != 0.0)),
        }

    def bootstrap_values(
        self,
        seqs: Sequence[TrainSeq],
        trajs: Sequence[Trajectory],
        last_seq: Sequence[int],
        order: Sequence[int],
    ) -> torch.Tensor:
        """``(len(order),)`` value of the state after each trajectory's last action: 0 when
        it terminated, the critic's estimate on its final observation when it was cut."""
        boot = torch.zeros(len(order))
        probes: list[TrainSeq] = []
        rows: list[int] = []
        for row, (traj, i) in enumerate(zip(order, last_seq, strict=True)):
            if trajs[traj].episode.cut and trajs[traj].tail_ids:
                ids = [*seqs[i].ids, *trajs[traj].tail_ids, self.learner.pad_id]
                # the value predicted for the extra last token reads the state before it
                mask = [0] * (len(ids) - 1) + [1]
                probes.append(TrainSeq(ids, mask, [0.0] * len(ids), traj, seqs[i].version))
                rows.append(row)
        if probes:
            for row, per in zip(rows, self.learner.evaluate(probes, values=True), strict=True):
                boot[row] = per[-1]
        return boot


def explained_variance(
    returns: torch.Tensor, predicted: torch.Tensor, device: torch.device
) -> float:
    """``1 - Var(R - V) / Var(R)`` over every process's agent tokens (0 when the returns
    do not vary); ``returns`` and ``predicted`` are ``(n,)``."""
    ret, pred = returns.double(), predicted.double()
    sums = dist.all_sum(
        [
            float(ret.numel()),
            float(ret.sum()),
            float((ret**2).sum()),
            float((ret - pred).sum()),
            float(((ret - pred) ** 2).sum()),
        ],
        device,
    )
    n = max(sums[0], 1.0)
    var_r = sums[2] / n - (sums[1] / n) ** 2
    var_e = sums[4] / n - (sums[3] / n) ** 2
    return 1.0 - var_e / var_r if var_r > 1e-12 else 0.0
