"""From trajectories to padded training tensors, and the forward pass over agent tokens.

Token ``t`` of a sequence is predicted by the logits at ``t - 1``. All per-token arrays
here are aligned to the *predicted* token: ``mask[t]`` says token ``t`` was sampled by the
policy, ``sampler_logprobs[t]`` is its sampler log-probability, ``advantages[t]`` its
advantage. The forward pass evaluates the LM head only where ``mask`` is 1, so
observation, template, padding and truncated tokens cannot receive gradient.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from agentgym_envs.llm import precision
from agentgym_envs.rollout.episodes import Trajectory, token_versions


@dataclass
class TrainSeq:
    """One segment of one trajectory, ready for the loss."""

    ids: list[int]
    mask: list[int]
    sampler_logprobs: list[float]
    traj: int  # index of its trajectory in the batch
    version: int  # policy version that sampled it (the oldest of its tokens)
    advantages: list[float] = field(default_factory=list)
    # PPO: rewards at each turn's last token, and the discount to the next agent token
    rewards: list[float] = field(default_factory=list)
    gammas: list[float] = field(default_factory=list)
    # PPO: value targets and the critic's values at rollout time
    returns: list[float] = field(default_factory=list)
    old_values: list[float] = field(default_factory=list)
    # the policy version that sampled each token, where they differ (empty: every token
    # is ``version``): asynchronous rollouts can push new weights between two turns
    token_versions: list[int] = field(default_factory=list)

    @property
    def agent_tokens(self) -> int:
        return sum(self.mask)


def sequences(
    trajectories: Sequence[Trajectory], gamma: float, turn_discounts: Sequence[Sequence[float]]
) -> list[TrainSeq]:
    """One ``TrainSeq`` per segment, with per-token rewards and discounts for GAE.

    ``turn_discounts[i][k]`` is the discount from turn ``k`` of trajectory ``i`` to the
    next turn (``gamma`` or its time-aware version); tokens inside a turn get 1.
    """
    out = []
    for i, traj in enumerate(trajectories):
        discounts = turn_discounts[i]
        for seg in traj.segments:
            n = len(seg.ids)
            versions = token_versions(traj, seg)
            sampled = {v for v, m in zip(versions, seg.mask, strict=True) if m}
            rewards = [0.0] * n
            gammas = [1.0] * n
            for end, turn in zip(seg.turn_ends, seg.turns, strict=True):
                step_rewards = traj.episode.rewards
                rewards[end] = step_rewards[turn] if turn < len(step_rewards) else 0.0
                gammas[end] = discounts[turn] if turn < len(discounts) else gamma
            out.append(
                TrainSeq(
                    ids=list(seg.ids),
                    mask=list(seg.mask),
                    sampler_logprobs=list(seg.logprobs),
                    traj=i,
                    version=min(sampled, default=traj.policy_version),
                    rewards=rewards,
                    gammas=gammas,
                    token_versions=versions if len(sampled) > 1 else [],
                )
            )
    return out


def micro_batches(seqs: Sequence[TrainSeq], size: int) -> list[list[int]]:
    """Indices of ``seqs`` cut into micro-batches of ``size`` after a stable sort by length.

    A right-padded micro-batch computes every position up to its longest sequence, so
    micro-batches of similar lengths compute fewer padding positions than arrival order
    (128 FrozenLake episodes of 1 to 8 turns: about 30% fewer). What is summed over
    micro-batches (gradients, loss statistics) does not depend on their order up to
    float rounding; a caller that returns per-sequence results puts them back by index.
    """
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i].ids))
    return [order[i : i + size] for i in range(0, len(order), size)]


@dataclass
class Batch:
    """Right-padded tensors of a list of sequences, all (B, T)."""

    ids: torch.Tensor
    attention: torch.Tensor
    positions: torch.Tensor
    mask: torch.Tensor  # bool
    sampler_logprobs: torch.Tensor
    advantages: torch.Tensor

    @property
    def tokens(self) -> int:
        return int(self.mask.sum())


def collate(seqs: Sequence[TrainSeq], pad_id: int, device: torch.device) -> Batch:
    width = max(len(s.ids) for s in seqs)
    batch = len(seqs)
    ids = torch.full((batch, width), pad_id, dtype=torch.long)
    attention = torch.zeros((batch, width), dtype=torch.long)
    mask = torch.zeros((batch, width), dtype=torch.bool)
    mu = torch.zeros((batch, width), dtype=torch.float32)
    adv = torch.zeros((batch, width), dtype=torch.float32)
    for row, s in enumerate(seqs):
        n = len(s.ids)
        ids[row, :n] = torch.tensor(s.ids)
        attention[row, :n] = 1
        mask[row, :n] = torch.tensor(s.mask, dtype=torch.bool)
        mu[row, :n] = torch.tensor(s.sampler_logprobs)
        if s.advantages:
            adv[row, :n] = torch.tensor(s.advantages)
    mask[:, 0] = False  # the first token has no predictor
    positions = torch.arange(width).expand(batch, width).contiguous()
    return Batch(
        ids.to(device),
        attention.to(device),
        positions.to(device),
        mask.to(device),
        mu.to(device),
        adv.to(device),
    )


@dataclass
class AgentOutputs:
    """Per agent token (flattened in row-major order of ``mask``): all (N,)."""

    logprobs: torch.Tensor
    entropy: torch.Tensor
    values: torch.Tensor | None


def agent_forward(
    lm: torch.nn.Module,
    value_head: torch.nn.Module | None,
    batch: Batch,
    temperature: float,
    *,
    entropy_grad: bool = False,
    detach_values: bool = False,
) -> AgentOutputs:
    """Log-probabilities (and values) of the agent tokens of ``batch``.

    The decoder runs on the whole sequences; the LM head and the log-softmax run only on
    the positions that predict an agent token. ``detach_values`` feeds the value head
    detached features, so the critic's loss never reaches the trunk.
    """
    decoder = lm.get_decoder()  # type: ignore[operator]
    head = lm.get_output_embeddings()  # type: ignore[operator]
    with precision.compute(batch.ids.device):
        hidden = decoder(
            input_ids=batch.ids,
            attention_mask=batch.attention,
            position_ids=batch.positions,
            use_cache=False,
        ).last_hidden_state  # (B, T, H)
        predictors = hidden[:, :-1][batch.mask[:, 1:]]  # (N, H)
        logits = head(predictors).float() / (temperature or 1.0)  # (N, V)
    targets = batch.ids[:, 1:][batch.mask[:, 1:]]  # (N,)
    logp_all = torch.log_softmax(logits, dim=-1)
    logprobs = logp_all.gather(1, targets[:, None]).squeeze(1)
    with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
        source = logp_all if entropy_grad else logp_all.detach()
        entropy = -(source.exp() * source).sum(-1)
    features = predictors.detach() if detach_values else predictors
    values = value_head(features.float()).float() if value_head is not None else None
    return AgentOutputs(logprobs, entropy, values)


def flat(batch: Batch, per_token: torch.Tensor) -> torch.Tensor:
    """(B, T) per-token values aligned to predicted tokens -> (N,) in agent-token order."""
    return per_token[:, 1:][batch.mask[:, 1:]]
