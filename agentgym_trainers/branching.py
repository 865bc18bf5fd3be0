"""Branch rollouts: per-turn credit from Monte-Carlo samples at chosen turns (``--branch``).

A group advantage gives every turn of an episode the same credit. Branch rollouts give a
chosen turn its own (VinePPO-style Monte-Carlo estimates from intermediate states):

1. while the step's episodes are played, the runner keeps a checkpoint before every turn
   (:class:`~agentgym_envs.rollout.episodes.TurnCheckpoint`: the env's snapshot through the
   public ``env.unwrapped.get_state()``, and the policy's context: its token ids, chat,
   episode bookkeeping);
2. up to ``branch_max_turns`` turns of each valid episode are chosen by the rule (below)
   and recorded in its ``context["branch"]``;
3. from each chosen turn ``t``, ``branch_k - 1`` branches restore the snapshot into free
   env slots (``set_state``) and sample their own action ``t`` from the same context,
   then play on to the end of the episode with the same policy. The branches of every
   point run together, one batched generation call per turn over the env slots, like
   any rollout; they are never branched again;
4. the ``branch_k`` actions taken at ``t`` (the original's and the branches') form a
   group: each gets its return from ``t`` on (discounted as the run's returns) minus the
   group's baseline: the mean for GRPO (divided by the std with ``--adv-scale std``) and
   REINFORCE, the mean of the others for RLOO. A point with fewer than 2 valid samples
   (an env error) is dropped;
5. the original's tokens of turn ``t`` take that advantage in place of its episode's
   group advantage (its other turns keep theirs); each branch adds one training sequence,
   its prefix as context (mask 0) and its action ``t`` as the only trained tokens.

Only the branched action is trained in a branch: the ``branch_k`` returns are samples
from one state, so they are a baseline for the actions taken *there*; a branch's later
actions were taken in other states, for which its return minus this baseline credits
what action ``t`` did. The continuation is the cost of the estimate, not training data.
The same goes for turns after ``t`` in the original: they keep the episode's credit.

Where to branch (``--branch``):

* ``every`` -- any turn; ``branch_max_turns`` of them drawn at random (seeded);
* ``entropy`` -- the turns whose sampled tokens were least likely (the largest mean
  ``-log mu`` of the action's tokens: the sampled estimate of the turn's entropy);
* ``first_error`` -- the turn whose action caused the episode's first policy error
  (``info["error"]``: parse, unknown tool, bad arguments, blocked) or safety gate, so the
  branches start from the state just before it; in a failed episode without one, the
  first turn after the last one that reached a new milestone (where progress stalled;
  turn 0 when none was reached). One point per episode;
* ``tool`` -- turns whose step parsed a tool call; drawn as ``every`` does;
* ``write`` -- turns that called a WRITE tool (``Tool.kind``, read from the env's tool
  set); drawn as ``every`` does. An env without WRITE tools is a ``ConfigError``.

Cost. Every turn of every episode takes an env snapshot (one ``get_state``; a Ray pool
makes it a round trip to the actor), and each point costs ``branch_k - 1`` episodes'
remainders of env steps and generated tokens. The step logs ``branch_points``,
``branch_env_steps``, ``branch_tokens`` (generated in branches) and ``branch_cost``
(branch tokens per agent token trained on). The prefix is not copied between branches:
with the static engine a branch reuses the KV cache of the longest prefix its slot's
cache row already holds (at least the system prompt when the slot played the same
task last), and recomputes the rest once; with ``--generation hf`` the prefix is
recomputed. The loss's forward pass also reads each branch's prefix again.

Works with ``grpo``, ``rloo`` and ``reinforce`` and ``--rollout sync`` (PPO credits
turns with its critic, and asynchronous rollouts would need the branches in the
rollout worker: both are a ``ConfigError``), with envs in this process or on a Ray env
pool (the pool's ``get_state``/``set_state``). State that wrappers keep outside the env
(Gymnasium's ``TimeLimit`` count) is not in the snapshot; agentgym envs keep their step
budget inside it.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.tools import ToolKind
from agentgym_envs.core.views import TOOLSET, env_view
from agentgym_envs.rollout import LocalEnvSlots, snapshot_api
from agentgym_envs.rollout.episodes import RolloutRunner, Segment, Trajectory, TurnCheckpoint
from agentgym_trainers import distributed as dist
from agentgym_trainers.algorithms.advantages import (
    grpo_advantages,
    rloo_advantages,
    zero_variance_groups,
)
from agentgym_trainers.batch import TrainSeq
from agentgym_trainers.config import TrainConfig

log = logging.getLogger(__name__)

BRANCH_RULES = ("every", "entropy", "first_error", "tool", "write")
"""Where to branch (the values of ``--branch`` other than ``none``)."""


# -- where to branch ------------------------------------------------------------------------


def locate(traj: Trajectory, turn: int) -> tuple[int, int]:
    """``(j, k)``: turn ``turn``'s action is ``traj.segments[j].turns[k]``.

    Raises:
        ValueError: the trajectory has no such turn in its segments.
    """
    for j, seg in enumerate(traj.segments):
        if turn in seg.turns:
            return j, seg.turns.index(turn)
    raise ValueError(f"turn {turn} is in no segment of a {len(traj.actions)}-turn trajectory")


def surprisal(traj: Trajectory, turn: int) -> float:
    """Mean ``-log mu`` of the sampled tokens of ``turn``'s action (an unbiased estimate
    of the mean entropy of the distributions they were drawn from)."""
    j, k = locate(traj, turn)
    seg = traj.segments[j]
    first, last = seg.turn_span(k)
    return -sum(seg.logprobs[first : last + 1]) / (last + 1 - first)


def first_error_turn(traj: Trajectory) -> int | None:
    """The turn of the first policy error or safety gate; else, in a failed episode, the
    first turn after the last one that reached a new milestone (see the module doc)."""
    facts = traj.turn_facts
    for t, fact in enumerate(facts):
        if fact.error:
            return t
    if traj.episode.success:
        return None
    last, reached = -1, 0
    for t, fact in enumerate(facts):
        if fact.milestones > reached:
            last, reached = t, fact.milestones
    return last + 1 if last + 1 < len(traj.actions) else None


def branch_turns(
    traj: Trajectory,
    rule: str,
    max_turns: int,
    rng: np.random.Generator,
    writes: frozenset[str] = frozenset(),
) -> list[int]:
    """The turns of ``traj`` to branch from under ``rule`` (sorted; none for an invalid
    episode, and only turns with a checkpoint).

    Raises:
        ConfigError: an unknown rule.
    """
    if rule not in BRANCH_RULES:
        raise ConfigError(f"--branch must be 'none' or one of {BRANCH_RULES}, got {rule!r}")
    if not traj.episode.valid:
        return []
    turns = min(len(traj.actions), len(traj.checkpoints))
    ready = [t for t in range(turns) if traj.checkpoints[t] is not None]
    facts = traj.turn_facts
    if rule == "first_error":
        t = first_error_turn(traj)
        return [t] if t in ready else []
    if rule == "entropy":  # the highest first; ties keep the earlier turn
        return sorted(sorted(ready, key=lambda t: -surprisal(traj, t))[:max_turns])
    if rule == "tool":
        ready = [t for t in ready if t < len(facts) and facts[t].tools]
    elif rule == "write":
        ready = [t for t in ready if t < len(facts) and writes.intersection(facts[t].tools)]
    if len(ready) > max_turns:
        ready = sorted(int(t) for t in rng.choice(ready, size=max_turns, replace=False))
    return ready


def write_tools(env: gym.Env[Any, Any]) -> frozenset[str]:
    """The canonical names of ``env``'s WRITE tools (what ``info["tool_calls"]`` names).

    Raises:
        ConfigError: the env declares none (``--branch write`` would never branch).
    """
    tools = env_view(env, TOOLSET)
    listed = tools.toolset.values() if tools is not None else ()
    names = frozenset(t.canonical for t in listed if t.kind is ToolKind.WRITE)
    if not names:
        raise ConfigError(
            f"{type(env.unwrapped).__name__} declares no WRITE tool, so --branch write "
            "would never branch: use --branch tool or --branch every"
        )
    return names


# -- playing the branches -------------------------------------------------------------------


@dataclass
class BranchStats:
    """What one step's branches cost (this process)."""

    points: int = 0
    env_steps: int = 0
    tokens: int = 0
    generation_s: float = 0.0
    env_s: float = 0.0


class Brancher:
    """Chooses branch points and plays their branches on a runner's env slots.

    Args:
        runner: plays the branches (its slots, sampler and context policy).
        rule: where to branch (one of :data:`BRANCH_RULES`).
        k: actions compared per point, the original's included (``k - 1`` branches).
        max_turns: branch points per episode at most.
        writes: the canonical names of the env's WRITE tools (rule ``write``).
        seed: seed of the draw among candidate turns (with the step: a resumed run
            draws the same turns).

    Raises:
        ConfigError: an unknown rule, ``k < 2`` or ``max_turns < 1``.
    """

    def __init__(
        self,
        runner: RolloutRunner,
        rule: str,
        k: int,
        max_turns: int,
        *,
        writes: frozenset[str] = frozenset(),
        seed: int = 0,
    ) -> None:
        if rule not in BRANCH_RULES:
            raise ConfigError(f"--branch must be 'none' or one of {BRANCH_RULES}, got {rule!r}")
        if k < 2 or max_turns < 1:
            raise ConfigError(
                f"branch rollouts need k >= 2 and max_turns >= 1, got {k} and {max_turns}"
            )
        self.runner = runner
        self.rule, self.k, self.max_turns = rule, k, max_turns
        self.writes = writes
        self.seed = seed

    def branch(
        self, trajs: Sequence[Trajectory], policy_version: int, step: int = 0
    ) -> BranchStats:
        """Choose the points of ``trajs`` (played with ``checkpoints=True``; turns drawn
        with the seed and ``step``), play their branches with the runner's sampler
        (recorded as ``policy_version``) and attach them to their trajectories
        (``Trajectory.branches``); the checkpoints are freed.

        Points are chosen before the algorithm drops groups, so an episode of a group
        that GRPO/RLOO later drop (fewer than 2 valid members) is branched too: its cost
        counts in ``branch_cost``, its credit is never used."""
        rng = np.random.default_rng([self.seed, 11, step])
        points: list[tuple[int, int]] = []
        for i, traj in enumerate(trajs):
            turns = branch_turns(traj, self.rule, self.max_turns, rng, self.writes)
            traj.context["branch"] = {"rule": self.rule, "turns": turns}
            points += [(i, t) for t in turns]
        jobs: list[TurnCheckpoint] = []
        for i, t in points:
            ckpt = trajs[i].checkpoints[t]
            assert ckpt is not None and ckpt.turn == t
            jobs += [ckpt] * (self.k - 1)
        for traj in trajs:
            traj.checkpoints = []
        stats = BranchStats(points=len(points))
        if not jobs:
            return stats
        played, rstats = self.runner.collect(jobs, policy_version)
        n = self.k - 1
        for p, (i, t) in enumerate(points):
            branches = played[p * n : (p + 1) * n]
            trajs[i].branches[t] = branches
            stats.env_steps += sum(max(b.episode.steps - t, 0) for b in branches)
        stats.tokens = rstats.generated_tokens
        stats.generation_s, stats.env_s = rstats.generation_s, rstats.env_s
        log.debug("branched %d points (%d episodes)", len(points), len(jobs))
        return stats


def make_brancher(
    cfg: TrainConfig, runner: RolloutRunner, make_env: Callable[[], gym.Env[Any, Any]]
) -> Brancher | None:
    """The run's :class:`Brancher` (None with ``--branch none``), after checking on an
    env (the runner's first, or a probe built here when the envs live on a Ray pool) that
    it has the snapshot API and, for ``write``, WRITE tools.

    Raises:
        ConfigError: no snapshot API, or no WRITE tool for ``--branch write``.
    """
    a = cfg.advantage
    if a.branch == "none":
        return None
    slots = runner.slots
    local = isinstance(slots, LocalEnvSlots)
    env = slots.envs[0] if isinstance(slots, LocalEnvSlots) else make_env()
    try:
        snapshot_api(env)
        writes = write_tools(env) if a.branch == "write" else frozenset()
    finally:
        if not local:
            env.close()
    return Brancher(
        runner, a.branch, a.branch_k, a.branch_max_turns, writes=writes, seed=cfg.data.seed
    )


# -- credit ---------------------------------------------------------------------------------


def return_from(traj: Trajectory, turn: int, gamma: float, rate: float) -> float:
    """The return from ``turn`` on, discounted as the run's returns are (``gamma *
    exp(-rate * dt)`` after each turn of env time ``dt``)."""
    ret, scale = 0.0, 1.0
    durations = traj.durations_s
    for k in range(turn, len(traj.episode.rewards)):
        ret += scale * traj.episode.rewards[k]
        scale *= gamma * math.exp(-rate * durations[k]) if k < len(durations) else gamma
    return float(ret)


def branch_sequence(branch: Trajectory, turn: int, index: int, advantage: float) -> TrainSeq:
    """A branch's training sequence: its tokens up to the end of its action ``turn``, that
    action the only trained (mask 1) tokens, each carrying ``advantage``; ``index`` is the
    original trajectory's index in the batch."""
    j, k = locate(branch, turn)
    seg: Segment = branch.segments[j]
    first, last = seg.turn_span(k)
    mask = [0] * first + [1] * (last + 1 - first)
    return TrainSeq(
        ids=seg.ids[: last + 1],
        mask=mask,
        sampler_logprobs=seg.logprobs[: last + 1],
        traj=index,
        version=branch.turn_versions[turn],
        advantages=[advantage * m for m in mask],
    )


def branch_credit(
    trajs: Sequence[Trajectory], seqs: list[TrainSeq], cfg: TrainConfig, device: torch.device
) -> tuple[list[TrainSeq], dict[str, float]]:
    """Steps 4-5 of the module docstring, on the kept sequences ``seqs`` (one per segment
    of each kept trajectory, in order, carrying their episode advantage): the original's
    branched turns are re-credited in place, and the branches' sequences are appended.

    Returns the sequences and ``branch_zero_variance_rate`` (the share of branch points
    whose samples all returned the same: no signal), summed over processes.
    """
    if cfg.advantage.branch == "none":
        return seqs, {}
    gamma, rate = cfg.advantage.gamma, cfg.advantage.time_discount
    by_traj: dict[int, list[TrainSeq]] = {}
    for s in seqs:
        by_traj.setdefault(s.traj, []).append(s)
    # 1. every point of a kept trajectory is one group: the original, then its branches
    members: list[tuple[int, int, Trajectory]] = []  # (trajectory index, turn, member)
    for i, traj in enumerate(trajs):
        if i not in by_traj:
            continue
        assert len(by_traj[i]) == len(traj.segments), "a kept trajectory keeps every segment"
        for turn, branches in sorted(traj.branches.items()):
            members += [(i, turn, m) for m in (traj, *branches)]
    returns = torch.tensor([return_from(m, t, gamma, rate) for _, t, m in members])
    valid = torch.tensor([m.episode.valid and len(m.actions) > t for _, t, m in members])
    point: dict[tuple[int, int], int] = {}
    for i, t, _ in members:
        point.setdefault((i, t), len(point))
    groups = torch.tensor([point[i, t] for i, t, _ in members], dtype=torch.long)
    # 2. the baseline of each point
    if not members:
        adv, kept = torch.zeros(0), torch.zeros(0, dtype=torch.bool)
    elif cfg.algo == "rloo":
        adv, kept = rloo_advantages(returns, groups, valid)
    else:  # grpo (its --adv-scale) and reinforce (the mean)
        scale = cfg.advantage.adv_scale if cfg.algo == "grpo" else "none"
        adv, kept = grpo_advantages(returns, groups, valid, scale=scale)
    zero, n_points = zero_variance_groups(returns, groups, valid) if members else (0, 0)
    # 3. the original's tokens of the turn, then one sequence per branch
    out = list(seqs)
    for (i, turn, member), a, keep in zip(members, adv.tolist(), kept.tolist(), strict=True):
        if not keep:
            continue
        if member is trajs[i]:
            j, k = locate(member, turn)
            first, last = member.segments[j].turn_span(k)
            s = by_traj[i][j]
            s.advantages[first : last + 1] = [a * m for m in s.mask[first : last + 1]]
        else:
            out.append(branch_sequence(member, turn, i, a))
    z = dist.all_sum([float(zero), float(n_points)], device)
    return out, {"branch_zero_variance_rate": z[0] / max(z[1], 1.0)}


def branch_metrics(
    stats: BranchStats, seqs: Sequence[TrainSeq], device: torch.device
) -> dict[str, float]:
    """The step's branch metrics, summed over processes: points, env steps and generated
    tokens of the branches, and ``branch_cost``, their tokens per agent token trained on."""
    trained = float(sum(s.agent_tokens for s in seqs))
    points, steps, tokens, trained = dist.all_sum(
        [float(stats.points), float(stats.env_steps), float(stats.tokens), trained], device
    )
    return {
        "branch_points": points,
        "branch_env_steps": steps,
        "branch_tokens": tokens,
        "branch_cost": tokens / max(trained, 1.0),
    }


__all__ = [
    "BRANCH_RULES",
    "BranchStats",
    "Brancher",
    "branch_credit",
    "branch_metrics",
    "branch_sequence",
    "branch_turns",
    "first_error_turn",
    "make_brancher",
    "return_from",
    "surprisal",
    "write_tools",
]
