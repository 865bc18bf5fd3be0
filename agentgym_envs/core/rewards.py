"""Versioned reward configuration and the pure per-step reward function.

The episode return follows a layered rule (the design article, section 5):

1. a safety stop returns exactly ``hard_fail``, whatever was earned before;
2. a success returns ``success - penalties`` (the task reward ``M`` minus cost);
3. any other end returns ``progress - penalties``.

``progress`` is paid densely: each milestone pays its share of ``milestone_total`` the
first time it is reached. ``penalties`` are the ledger cost times ``cost_weight`` plus
``format_penalty`` per policy error, capped at ``max_penalty`` per episode. On success
the ``success`` component is ``M`` minus the progress already paid, so milestones guide
failed episodes but never inflate a success. On a safety stop the ``safety`` component
settles the return to ``hard_fail``, so "collect milestones, then violate" never pays.

Because ``success - max_penalty > milestone_total`` is enforced, a legitimate success
always beats any failure, and ``hard_fail < -max_penalty`` makes a safety stop worse
than any failure.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field, fields

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.info import Outcome

COMPONENTS = ("success", "milestone", "cost", "format", "safety")


@dataclass(frozen=True)
class RewardConfig:
    """Reward weights. Frozen and versioned: ``info["versions"]["reward"]`` carries
    ``version`` plus a fingerprint of every field, so changing a weight without bumping
    the version still changes the recorded version string.

    Attributes:
        version: a human-chosen name for this reward scheme.
        success: ``M``, the return of a success before penalties.
        milestone_total: what reaching every milestone of a task pays in total.
        cost_weight: reward units per ledger cost unit.
        format_penalty: penalty per policy error (unparsable action, unknown tool, ...).
        max_penalty: cap on the summed cost and format penalties of one episode.
        hard_fail: the exact return of an episode that a safety gate stopped.
    """

    version: str = "layered-1"
    success: float = 1.0
    milestone_total: float = 0.5
    cost_weight: float = 0.002
    format_penalty: float = 0.01
    max_penalty: float = 0.25
    hard_fail: float = -1.0
    fingerprint: str = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        values = {
            f.name: getattr(self, f.name) for f in fields(self) if f.init and f.name != "version"
        }
        bad = [k for k, v in values.items() if not math.isfinite(v)]
        if bad:
            raise ConfigError(f"RewardConfig fields {bad} must be finite numbers")
        negative = [
            k
            for k in ("milestone_total", "cost_weight", "format_penalty", "max_penalty")
            if values[k] < 0
        ]
        if negative:
            raise ConfigError(f"RewardConfig fields {negative} must be >= 0")
        if self.success - self.max_penalty <= self.milestone_total:
            raise ConfigError(
                f"RewardConfig: success ({self.success}) - max_penalty ({self.max_penalty}) must "
                f"exceed milestone_total ({self.milestone_total}) so that a success always beats a "
                "failure; raise success or lower milestone_total/max_penalty"
            )
        if self.hard_fail >= -self.max_penalty:
            raise ConfigError(
                f"RewardConfig: hard_fail ({self.hard_fail}) must be below -max_penalty "
                f"({-self.max_penalty}) so that a safety stop is worse than any failure"
            )
        digest = hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:8]
        object.__setattr__(self, "fingerprint", digest)

    @property
    def version_tag(self) -> str:
        """``version+fingerprint``, the string recorded in ``info["versions"]["reward"]``."""
        return f"{self.version}+{self.fingerprint}"

    def step_bounds(self) -> tuple[float, float]:
        """The smallest and largest reward a single step can return."""
        low = min(
            self.hard_fail - self.milestone_total,
            -self.max_penalty,
            self.success - self.milestone_total - self.max_penalty,
        )
        high = max(self.success, self.milestone_total, self.hard_fail + self.max_penalty)
        return low, high

    def return_bounds(self) -> tuple[float, float]:
        """The smallest and largest return a whole episode can have."""
        return self.hard_fail, self.success


@dataclass(slots=True)
class RewardTally:
    """What an episode has been paid so far (part of every snapshot)."""

    progress: float = 0.0
    penalty: float = 0.0
    total: float = 0.0

    def as_tuple(self) -> tuple[float, float, float]:
        return (self.progress, self.penalty, self.total)


def step_reward(
    config: RewardConfig,
    tally: RewardTally,
    *,
    outcome: Outcome,
    milestone_share: float,
    cost: float,
    errors: int,
) -> dict[str, float]:
    """Compute one step's reward components and update ``tally`` in place.

    Args:
        config: the reward weights.
        tally: the episode's running totals; updated.
        outcome: the outcome after this step.
        milestone_share: the summed weight share (0..1) of milestones first reached
            this step.
        cost: ledger cost units charged this step.
        errors: policy errors this step.

    Returns:
        The components (keys of ``COMPONENTS``); the step reward is their sum.
    """
    if outcome is Outcome.ENV_ERROR:
        return dict.fromkeys(COMPONENTS, 0.0)
    wanted = cost * config.cost_weight + errors * config.format_penalty
    penalty = min(wanted, config.max_penalty - tally.penalty)
    milestone = milestone_share * config.milestone_total
    milestone = min(milestone, config.milestone_total - tally.progress)
    tally.penalty += penalty
    tally.progress += milestone
    success = safety = 0.0
    if outcome is Outcome.SUCCESS:
        success = config.success - tally.progress
    elif outcome is Outcome.SAFETY_STOP:
        before = tally.total
        safety = config.hard_fail - before - milestone + penalty
    components = {
        "success": success,
        "milestone": milestone,
        # the penalty is split between its causes: tool cost first, then format errors
        "cost": -min(penalty, cost * config.cost_weight),
        "format": 0.0,
        "safety": safety,
    }
    components["format"] = -(penalty + components["cost"])
    tally.total += sum(components.values())
    return components
