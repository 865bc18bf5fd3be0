"""Pure metric functions over episode records."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from agentgym_envs.core.info import Outcome
from agentgym_envs.eval.runner import EpisodeRecord


def _natural(name: str) -> list[Any]:
    """Sort key that puts ``stage:2`` before ``stage:10``."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def wilson_interval(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval for a binomial proportion (95% by default).

    Unlike the normal approximation it stays inside [0, 1] and is sensible at 0 or n
    successes, which small evaluations hit all the time.
    """
    if n <= 0:
        return (0.0, 1.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return (max(0.0, centre - half), min(1.0, centre + half))


@dataclass
class Summary:
    """Aggregate figures of a set of episodes of one env and policy.

    Env-error episodes are excluded from every rate's denominator and reported apart.
    """

    env_id: str
    policy: str
    episodes: int
    valid: int
    success_rate: float
    success_ci: tuple[float, float]
    stage_rates: dict[str, float]
    mean_steps: float
    mean_return: float
    mean_cost: float
    cost_per_success: float | None
    safety_stop_rate: float
    env_error_rate: float
    outcomes: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def summarize(records: Sequence[EpisodeRecord]) -> Summary:
    """Summarise the records of one env and policy."""
    if not records:
        raise ValueError("summarize needs at least one episode record")
    valid = [r for r in records if r.valid]
    n = len(valid)
    wins = sum(r.success for r in valid)
    stages: dict[str, int] = {}
    for r in valid:
        for m in r.milestones:
            stages[m] = stages.get(m, 0) + 1
    outcomes: dict[str, int] = {}
    for r in records:
        outcomes[r.outcome] = outcomes.get(r.outcome, 0) + 1
    total_cost = sum(float(r.cost["total"]) for r in valid)
    mean = lambda xs: sum(xs) / len(xs) if xs else 0.0  # noqa: E731
    return Summary(
        env_id=records[0].env_id,
        policy=records[0].policy,
        episodes=len(records),
        valid=n,
        success_rate=wins / n if n else 0.0,
        success_ci=wilson_interval(wins, n),
        stage_rates={k: stages[k] / n for k in sorted(stages, key=_natural)} if n else {},
        mean_steps=mean([r.steps for r in valid]),
        mean_return=mean([r.reward for r in valid]),
        mean_cost=total_cost / n if n else 0.0,
        cost_per_success=total_cost / wins if wins else None,
        safety_stop_rate=(sum(r.outcome == Outcome.SAFETY_STOP for r in valid) / n) if n else 0.0,
        env_error_rate=(len(records) - n) / len(records),
        outcomes=outcomes,
    )
