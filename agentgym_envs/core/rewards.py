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

Step checks (``core.step_checks``) add ``local_weight`` (λ) times the episode's local
scores: ``R = r_goal + λ Σ r_local``. Like milestones they shape the path, never the
value of an outcome: a success and a safety stop settle the return as above, and
:meth:`RewardConfig.check_local` bounds λ so that a failure's best return stays below
any success and its worst above a safety stop. With ``local_weight=0`` (the default)
nothing changes, not even the version string.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from agentgym_envs.core.errors import ConfigError, did_you_mean
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
        local_weight: λ, the weight of the step checks' local scores (``core.step_checks``);
            0 turns them off. :meth:`check_local` bounds it per env and step budget.
    """

    version: str = "layered-1"
    success: float = 1.0
    milestone_total: float = 0.5
    cost_weight: float = 0.002
    format_penalty: float = 0.01
    max_penalty: float = 0.25
    hard_fail: float = -1.0
    local_weight: float = 0.0
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
            for k in (
                "milestone_total",
                "cost_weight",
                "format_penalty",
                "max_penalty",
                "local_weight",
            )
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
        if self.local_weight == 0:  # off: the fingerprint of every config before λ existed
            del values["local_weight"]
        digest = hashlib.sha256(json.dumps(values, sort_keys=True).encode()).hexdigest()[:8]
        object.__setattr__(self, "fingerprint", digest)

    @property
    def version_tag(self) -> str:
        """``version+fingerprint``, the string recorded in ``info["versions"]["reward"]``."""
        local = f"+local{self.local_weight:g}" if self.local_weight else ""
        return f"{self.version}+{self.fingerprint}{local}"

    def max_local_weight(self, gain: float, loss: float) -> float:
        """The bound λ must stay strictly below, for an episode whose local scores can
        add up to at most ``gain`` and at least ``-loss`` (``StepCheckSpec.episode_bounds``
        summed over an env's checks for its step budget).

        A failure returns at most ``milestone_total + λ·gain`` and must stay below the
        worst success, ``success - max_penalty``; it returns at least
        ``-max_penalty - λ·loss`` and must stay above a safety stop, ``hard_fail``.
        """
        margins = [(self.success - self.max_penalty - self.milestone_total, gain)]
        margins.append((-self.max_penalty - self.hard_fail, loss))
        return min((m / total for m, total in margins if total > 0), default=math.inf)

    def check_local(self, bounds: Iterable[tuple[float, float]], context: str) -> None:
        """Raise ConfigError when ``local_weight`` lets local scores overturn an outcome.

        Args:
            bounds: ``(gain, loss)`` per step check: the most one episode can earn and
                lose from it (both >= 0).
            context: what the bounds are for (an env and step budget), for the message.
        """
        if self.local_weight == 0:
            return
        pairs = list(bounds)
        gain, loss = sum(g for g, _ in pairs), sum(lo for _, lo in pairs)
        limit = self.max_local_weight(gain, loss)
        if self.local_weight >= limit:
            raise ConfigError(
                f"RewardConfig.local_weight ({self.local_weight}) must be below {limit:.6g} "
                f"for {context} (local scores up to +{gain:g}/-{loss:g} per episode), so "
                "that a success always beats any failure and a safety stop stays the worst "
                f"end; set local_weight below {limit:.6g}, or lower the checks' caps"
            )

    def step_bounds(self, gain: float = 0.0, loss: float = 0.0) -> tuple[float, float]:
        """The smallest and largest reward a single step can return.

        With ``local_weight`` > 0 pass the step checks' per-episode ``gain`` and ``loss``
        (``core.step_checks.local_bounds``): a success or a safety stop settles the return,
        so its step gives back (or takes) whatever local scores paid before it.
        """
        up, down = self.local_weight * gain, self.local_weight * loss
        low = min(
            self.hard_fail - self.milestone_total - up,
            -self.max_penalty - down,
            self.success - self.milestone_total - self.max_penalty - up,
        )
        high = max(
            self.success + down,
            self.milestone_total + up,
            self.hard_fail + self.max_penalty + down,
        )
        return low, high

    def return_bounds(self) -> tuple[float, float]:
        """The smallest and largest return a whole episode can have."""
        return self.hard_fail, self.success


@dataclass(slots=True)
class RewardTally:
    """What an episode has been paid so far (part of every snapshot).

    ``local`` is the λ-weighted local reward paid; ``levels`` what each step check has
    reached (``core.step_checks``: the best progress, the worst setback, the summed
    penalty), so no check pays twice for the same thing, across snapshots too.
    """

    progress: float = 0.0
    penalty: float = 0.0
    total: float = 0.0
    local: float = 0.0
    levels: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.levels = dict(self.levels)  # a snapshot stores them as sorted pairs

    def as_tuple(self) -> tuple[Any, ...]:
        """Plain data for snapshots; the 3-tuple of old while no step check was scored."""
        if not self.levels and not self.local:
            return (self.progress, self.penalty, self.total)
        return (
            self.progress,
            self.penalty,
            self.total,
            self.local,
            tuple(sorted(self.levels.items())),
        )


def step_reward(
    config: RewardConfig,
    tally: RewardTally,
    *,
    outcome: Outcome,
    milestone_share: float,
    cost: float,
    errors: int,
    local: float = 0.0,
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
        local: the step checks' summed local score this step (``core.step_checks``),
            unweighted; paid as ``local_weight * local`` in a ``local`` component, which
            is there only when ``local_weight > 0``.

    Returns:
        The components (keys of ``COMPONENTS``, plus ``local`` when λ > 0); the step
        reward is their sum.
    """
    weighted = config.local_weight * local
    if outcome is Outcome.ENV_ERROR:
        return dict.fromkeys((*COMPONENTS, "local") if config.local_weight else COMPONENTS, 0.0)
    wanted = cost * config.cost_weight + errors * config.format_penalty
    penalty = min(wanted, config.max_penalty - tally.penalty)
    milestone = milestone_share * config.milestone_total
    milestone = min(milestone, config.milestone_total - tally.progress)
    tally.penalty += penalty
    tally.progress += milestone
    tally.local += weighted
    success = safety = 0.0
    if outcome is Outcome.SUCCESS:  # local scores shaped the path; they never inflate a success
        success = config.success - tally.progress - tally.local
    elif outcome is Outcome.SAFETY_STOP:
        before = tally.total
        safety = config.hard_fail - before - milestone + penalty - weighted
    components = {
        "success": success,
        "milestone": milestone,
        # the penalty is split between its causes: tool cost first, then format errors
        "cost": -min(penalty, cost * config.cost_weight),
        "format": 0.0,
        "safety": safety,
    }
    components["format"] = -(penalty + components["cost"])
    if config.local_weight:
        components["local"] = weighted
    tally.total += sum(components.values())
    return components


def reward_config_from(given: RewardConfig | Mapping[str, Any] | None) -> RewardConfig:
    """The env's reward config from what its constructor was given: a
    :class:`RewardConfig`, a plain dict of its fields (JSON kwargs, the trainer's
    ``--env-kwargs``) or None (the default). A wrong type, an unknown field or a
    non-numeric weight raises ConfigError naming the fix."""
    if given is None:
        return RewardConfig()
    if isinstance(given, RewardConfig):
        return given
    if not isinstance(given, Mapping):
        raise ConfigError(
            "reward_config must be a RewardConfig (from agentgym_envs.core import "
            f"RewardConfig) or a dict of its fields, got {type(given).__name__}"
        )
    known = [f.name for f in fields(RewardConfig) if f.init]
    for name, value in given.items():
        if name not in known:
            raise ConfigError(
                f"reward_config has no field {name!r}; its fields are {known}."
                f"{did_you_mean(name, known)}"
            )
        if name == "version":
            ok, kind = isinstance(value, str), "a string"
        else:
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            kind = "a number"
        if not ok:
            raise ConfigError(f"reward_config[{name!r}] must be {kind}, got {value!r}")
    return RewardConfig(**dict(given))
