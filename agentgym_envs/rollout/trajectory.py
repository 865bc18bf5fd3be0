"""What a rollout produces: the job it played, the token segments a trainer sees, what
each turn reported, and the trajectory that holds them with the episode's summary.

The turn loop (:mod:`agentgym_envs.rollout.episodes`) fills these; trainers and
adapters read them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentgym_envs.core.episode import EpisodeSummary
from agentgym_envs.core.spans import Blame

if TYPE_CHECKING:
    from agentgym_envs.rollout.episodes import TurnCheckpoint


@dataclass(frozen=True)
class RolloutJob:
    """One episode to play: a task, the env seed and its GRPO group."""

    task_id: str | None
    env_seed: int | None
    group: int
    options: Mapping[str, Any] | None = field(default=None, compare=False)
    """More ``reset`` options (``split``, ``difficulty``, ``task_seed`` ...); ``task_id``,
    when set, is added to them."""

    def reset_options(self) -> dict[str, Any] | None:
        """The ``reset`` options of this job (None: none)."""
        options = dict(self.options or {})
        if self.task_id is not None:
            options["task_id"] = self.task_id
        return options or None


@dataclass
class Segment:
    """One token sequence the trainer sees. ``turns[i]`` ends at token ``turn_ends[i]``."""

    ids: list[int]
    mask: list[int]
    logprobs: list[float]
    turn_ends: list[int] = field(default_factory=list)
    turns: list[int] = field(default_factory=list)

    def extend(self, ids: Sequence[int], logprobs: Sequence[float] | None = None) -> None:
        self.ids.extend(ids)
        self.mask.extend([1 if logprobs is not None else 0] * len(ids))
        self.logprobs.extend(logprobs if logprobs is not None else [0.0] * len(ids))

    @property
    def agent_tokens(self) -> int:
        return sum(self.mask)

    def turn_span(self, k: int) -> tuple[int, int]:
        """``(first, last)`` token index of the action of ``self.turns[k]``: the run of
        mask-1 tokens that ends at ``turn_ends[k]`` (an action is never empty, and the
        template always puts a mask-0 token between two actions)."""
        last = first = self.turn_ends[k]
        while first > 0 and self.mask[first - 1]:
            first -= 1
        return first, last


@dataclass(frozen=True)
class TurnFacts:
    """What one step reported, kept per turn for choosing branch points."""

    tools: tuple[str, ...]
    """The tool calls parsed this step (their canonical names)."""
    error: bool
    """A policy error (parse, unknown tool, bad arguments, blocked) or a safety gate fired."""
    milestones: int
    """Milestones reached so far."""
    blame: Blame | None = None
    """The part of the action a parser error blamed and where it is in the action text
    (``info["error"]``; :mod:`agentgym_trainers.tool_credit`), or None."""

    @classmethod
    def of(cls, info: dict[str, Any]) -> TurnFacts:
        calls = info.get("tool_calls") or ()
        error = info.get("error")
        return cls(
            tools=tuple(str(c.get("name", "")) for c in calls),
            error=bool(error) or bool(info.get("safety")),
            milestones=len(info.get("milestones") or ()),
            blame=Blame.from_info(error) if isinstance(error, Mapping) else None,
        )


@dataclass
class Trajectory:
    """One episode: its token segments, the episode's summary and what reproduces it.

    Episode-level facts (outcome, validity, rewards, milestones, cost, versions, seeds)
    are in ``episode``, folded from the step infos like every other episode record;
    the token-level data (segments, the tail a critic bootstraps from) is the trainer's.
    """

    job: RolloutJob
    policy_version: int
    """The version of the weights that sampled its first turn (the oldest)."""
    segments: list[Segment] = field(default_factory=list)
    actions: list[str] = field(default_factory=list)
    durations_s: list[float] = field(default_factory=list)
    episode: EpisodeSummary = field(default_factory=EpisodeSummary)
    context: dict[str, Any] = field(default_factory=dict)
    retok_mismatches: int = 0
    # the chat as text, for the trajectory store: system prompt, then the observation
    # before each action and the one after the last
    system: str = ""
    observations: list[str] = field(default_factory=list)
    # a cut episode (time or context limit) did not end: the template and observation
    # tokens after its last action are the state a critic bootstraps from
    tail_ids: list[int] = field(default_factory=list)
    # the weights version that sampled each turn (one per action)
    turn_versions: list[int] = field(default_factory=list)
    # what each step reported (one per step), for choosing branch points
    turn_facts: list[TurnFacts] = field(default_factory=list)
    # collect(checkpoints=True): the checkpoint before each turn (None where the env's
    # snapshot could not be taken); branching frees them once it has played its branches
    checkpoints: list[TurnCheckpoint | None] = field(default_factory=list)
    # branch rollouts: turn -> the continuations played from the checkpoint before it
    # (each starts with this trajectory's first ``turn`` turns)
    branches: dict[int, list[Trajectory]] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        """Plain JSON data for the run's trajectory file (token ids left out)."""
        ep = self.episode
        return {
            "task_id": self.job.task_id,
            "group": self.job.group,
            "seeds": {**ep.seeds, "env": self.job.env_seed},
            "policy_version": self.policy_version,
            "turn_versions": list(self.turn_versions),
            "versions": dict(ep.versions),
            "return": ep.reward,
            "rewards": list(ep.rewards),
            "reward_components": dict(ep.reward_components),
            "outcome": ep.outcome.value,
            "truncation": ep.truncation.value,
            "success": ep.success,
            "valid": ep.valid,
            "error": ep.error or None,
            "turns": len(self.actions),
            "actions": self.actions,
            "durations_s": self.durations_s,
            "context": self.context,
            "retok_mismatches": self.retok_mismatches,
            "system": self.system,
            "observations": self.observations,
            "milestones": list(ep.milestones),
            "cost": dict(ep.cost),
            "started_at": ep.started_at,
            "tokens": [len(s.ids) for s in self.segments],
            "agent_tokens": [s.agent_tokens for s in self.segments],
        }


def token_versions(traj: Trajectory, seg: Segment) -> list[int]:
    """The weights version behind each token of one of ``traj``'s segments: a turn's
    version on its sampled tokens and on the prompt tokens before them (mask 0, so only
    the sampled ones matter); ``traj.policy_version`` where no turn was recorded."""
    out: list[int] = []
    for end, turn in zip(seg.turn_ends, seg.turns, strict=True):
        known = turn < len(traj.turn_versions)
        version = traj.turn_versions[turn] if known else traj.policy_version
        out += [version] * (end + 1 - len(out))
    out += [out[-1] if out else traj.policy_version] * (len(seg.ids) - len(out))
    return out[: len(seg.ids)]


def records(trajectories: Sequence[Trajectory]) -> list[dict[str, Any]]:
    return [t.record() for t in trajectories]


__all__ = [
    "RolloutJob",
    "Segment",
    "Trajectory",
    "TurnFacts",
    "records",
    "token_versions",
]
