"""The algorithm interface, and the steps every algorithm family shares.

An :class:`Algorithm` turns one rollout batch into training sequences whose per-token
``advantages`` the shared loss (:func:`~agentgym_trainers.algorithms.losses.step_loss`) weights.
Each family lives in a module of its own and reads top to bottom: ``group`` (GRPO, RLOO),
``reinforce`` (a running baseline), ``ppo`` (value head, GAE, bootstrap) and ``sft``
(imitation). :mod:`agentgym_trainers.algorithms.registry` maps the ``algo`` name to the class.

An algorithm reaches the model only through a :class:`Learner` (the trainer): token
log-probabilities or values of sequences, and the frozen KL reference.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import torch

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.rollout.episodes import Trajectory
from agentgym_trainers import distributed as dist
from agentgym_trainers.algorithms.advantages import whiten_with
from agentgym_trainers.algorithms.losses import kl_estimate
from agentgym_trainers.batch import TrainSeq, sequences
from agentgym_trainers.config import ALGO_TRAITS, AlgoTraits, TrainConfig


class Learner(Protocol):
    """What an algorithm may ask of the trainer."""

    @property
    def device(self) -> torch.device:
        """Where collective sums run."""
        ...

    @property
    def pad_id(self) -> int:
        """The padding token id."""
        ...

    def decode(self, ids: Sequence[int]) -> str:
        """The text of token ids, special tokens kept (for ``--tool-credit``)."""
        ...

    def evaluate(
        self, seqs: Sequence[TrainSeq], values: bool, model: torch.nn.Module | None = None
    ) -> list[list[float]]:
        """Per-token log-probabilities (or values) under the current weights (or under
        ``model``), aligned to tokens (0 where mask is 0)."""
        ...

    def reference(self) -> torch.nn.Module:
        """The frozen KL reference policy (made on first use)."""
        ...


class Algorithm(ABC):
    """One RL algorithm family: how a rollout batch becomes advantages.

    Args:
        cfg: the run's configuration.
        learner: the trainer, for forward passes and the KL reference.
    """

    name: ClassVar[str]
    """The ``algo`` name this class is registered under."""
    traits: ClassVar[AlgoTraits]
    """What the configuration knows of the algorithm (group, value head, RL, branches):
    its entry in :data:`~agentgym_trainers.config.ALGO_TRAITS`, declared there once so
    the torch-free config checks the same traits the trainer acts on."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        name = cls.__dict__.get("name")
        if name is None:
            return  # an abstract family or a variant keeps its parent's name and traits
        if name not in ALGO_TRAITS:
            raise ConfigError(
                f"{cls.__name__}.name {name!r} has no traits: add it to ALGO_TRAITS in "
                "agentgym_trainers/config.py"
            )
        cls.traits = ALGO_TRAITS[name]

    def __init__(self, cfg: TrainConfig, learner: Learner) -> None:
        self.cfg = cfg
        self.learner = learner

    @abstractmethod
    def advantages(self, trajs: Sequence[Trajectory]) -> tuple[list[TrainSeq], dict[str, float]]:
        """The sequences to train on, with ``advantages`` set on every token, and the
        batch's advantage metrics. Env-error episodes and dropped groups are left out."""

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint keeps of the algorithm (a running baseline, ...)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:  # noqa: B027 (most keep no state)
        """Restore what :meth:`state_dict` returned."""


# -- shared steps -----------------------------------------------------------------------------


@dataclass
class EpisodeBatch:
    """A rollout batch as episodes (``N`` trajectories) and their training sequences.

    Attributes:
        returns: ``(N,)`` discounted return of each episode from its start.
        valid: ``(N,)`` False for env-error episodes (masked, never a negative reward).
        groups: ``(N,)`` each episode's group id.
        seqs: one sequence per segment, with per-token rewards and discounts.
    """

    returns: torch.Tensor
    valid: torch.Tensor
    groups: torch.Tensor
    seqs: list[TrainSeq]

    @property
    def size(self) -> int:
        return int(self.valid.numel())


def episode_return(traj: Trajectory, gamma: float, rate: float) -> tuple[float, list[float]]:
    """Discounted return from the start, and the discount after each turn
    (``gamma * exp(-rate * dt)`` with ``dt`` the turn's env time)."""
    discounts = [gamma * math.exp(-rate * dt) for dt in traj.durations_s]
    ret, scale = 0.0, 1.0
    for k, reward in enumerate(traj.episode.rewards):
        ret += scale * reward
        scale *= discounts[k] if k < len(discounts) else gamma
    return ret, discounts


def episode_batch(trajs: Sequence[Trajectory], cfg: TrainConfig) -> EpisodeBatch:
    """Returns, validity, groups and sequences of a rollout batch."""
    gamma, rate = cfg.advantage.gamma, cfg.advantage.time_discount
    pairs = [episode_return(t, gamma, rate) for t in trajs]
    return EpisodeBatch(
        returns=torch.tensor([r for r, _ in pairs], dtype=torch.float32),
        valid=torch.tensor([t.episode.valid for t in trajs], dtype=torch.bool),
        groups=torch.tensor([t.job.group for t in trajs], dtype=torch.long),
        seqs=sequences(trajs, gamma, [d for _, d in pairs]),
    )


def broadcast(seqs: Sequence[TrainSeq], adv: torch.Tensor, kept: torch.Tensor) -> list[TrainSeq]:
    """The sequences of kept episodes that have agent tokens, each agent token carrying
    its episode's advantage (``adv`` and ``kept`` are ``(N,)``)."""
    out = [s for s in seqs if bool(kept[s.traj]) and s.agent_tokens > 0]
    for s in out:
        s.advantages = [float(adv[s.traj]) * m for m in s.mask]
    return out


def kl_penalties(learner: Learner, cfg: TrainConfig, seqs: Sequence[TrainSeq]) -> list[list[float]]:
    """``kl_coef * KL`` per agent token, from the sampler's log-probabilities and the
    reference's, for ``kl_in_reward`` (0 at mask-0 tokens)."""
    coef, estimator = cfg.objective.kl_coef, cfg.objective.kl_estimator
    ref = learner.evaluate(seqs, values=False, model=learner.reference())
    out = []
    for s, ref_row in zip(seqs, ref, strict=True):
        mu = torch.tensor(s.sampler_logprobs, dtype=torch.float64)
        kl = kl_estimate(mu, torch.tensor(ref_row, dtype=torch.float64), estimator)
        out.append([coef * float(k) * m for k, m in zip(kl, s.mask, strict=True)])
    return out


def charge_kl(
    learner: Learner, cfg: TrainConfig, seqs: Sequence[TrainSeq], into: str
) -> dict[str, float]:
    """With ``kl_in_reward``, subtract each token's KL penalty from ``s.<into>`` (the
    per-token ``rewards`` before GAE, or the ``advantages`` after a baseline); returns
    the mean penalty per agent token (nothing without the option or sequences)."""
    if not cfg.objective.kl_in_reward or not seqs:
        return {}
    penalties = kl_penalties(learner, cfg, seqs)
    mean = sum(map(sum, penalties)) / max(sum(s.agent_tokens for s in seqs), 1)
    for s, pen in zip(seqs, penalties, strict=True):
        target: list[float] = getattr(s, into)
        for t, p in enumerate(pen):
            target[t] -= p
    return {"kl_penalty": mean}


def whiten_tokens(seqs: Sequence[TrainSeq], device: torch.device, shift_mean: bool) -> None:
    """Whiten advantages with statistics over every process's agent tokens (every process
    joins, also with no sequence kept). ``shift_mean=False`` only scales: for advantages
    a group baseline already centres, where a shift would give a zero-signal group a
    non-zero advantage."""
    flat_adv = torch.tensor([a for s in seqs for a in s.advantages], dtype=torch.float64)
    flat_mask = torch.tensor([m for s in seqs for m in s.mask], dtype=torch.bool)
    picked = flat_adv[flat_mask]
    n, total, squares = dist.all_sum(
        [float(picked.numel()), float(picked.sum()), float((picked**2).sum())], device
    )
    white = whiten_with(flat_adv, flat_mask, n, total, squares, shift_mean=shift_mean).tolist()
    k = 0
    for s in seqs:
        s.advantages = white[k : k + len(s.mask)]
        k += len(s.mask)


def kept_rate(kept: torch.Tensor, device: torch.device) -> dict[str, float]:
    """The share of every process's episodes that reach the loss."""
    n = dist.all_sum([float(kept.sum()), float(kept.numel())], device)
    return {"kept_episode_rate": n[0] / max(n[1], 1.0)}
