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
    return Summary(
        env_id=records[0].env_id,
        policy=records[0].policy,
        episodes=len(records),
        valid=n,
        success_rate=wins / n if n else 0.0,
        success_ci=wilson_interval(wins, n),
        stage_rates={k: stages[k] / n for k in sorted(stages, key=_natural)} if n else {},
        mean_steps=_mean([r.steps for r in valid]),
        mean_return=_mean([r.reward for r in valid]),
        mean_cost=total_cost / n if n else 0.0,
        cost_per_success=total_cost / wins if wins else None,
        safety_stop_rate=(sum(r.outcome == Outcome.SAFETY_STOP for r in valid) / n) if n else 0.0,
        env_error_rate=(len(records) - n) / len(records),
        outcomes=outcomes,
    )


# -- per-task estimators over repeated trials -------------------------------------------


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task: the chance that at least one of ``k`` trials drawn
    without replacement from ``n`` (of which ``c`` succeeded) succeeds.

    ``1 - C(n-c, k) / C(n, k)`` (Chen et al., 2021); with ``n == k`` it is simply whether
    any trial succeeded.

    Raises:
        ValueError: ``k`` outside ``1..n`` or ``c`` outside ``0..n``.
    """
    _check_trials(n, c, k)
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k of one task (tau-bench): the chance that ``k`` trials drawn without
    replacement from ``n`` all succeed, ``C(c, k) / C(n, k)``. It falls with ``k`` for
    an agent that succeeds only sometimes: a measure of reliability, not of coverage.

    Raises:
        ValueError: ``k`` outside ``1..n`` or ``c`` outside ``0..n``.
    """
    _check_trials(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def _check_trials(n: int, c: int, k: int) -> None:
    if not 0 <= c <= n:
        raise ValueError(f"successes must be in 0..{n}, got {c}")
    if not 1 <= k <= n:
        raise ValueError(f"k must be in 1..{n} (the trials of the task), got {k}")


def ks_for(trials: int) -> list[int]:
    """The k values reported for ``trials`` trials per task: powers of two and ``trials``."""
    ks = [k for k in (1, 2, 4, 8, 16, 32) if k <= trials]
    if trials >= 1 and trials not in ks:
        ks.append(trials)
    return ks


def task_pass_rates(
    per_task: Sequence[tuple[int, int]], ks: Sequence[int]
) -> tuple[dict[str, float], dict[str, float], dict[str, int]]:
    """Mean pass@k and pass^k over tasks, from each task's (valid trials, successes).

    A task enters the mean for ``k`` only when it has at least ``k`` valid trials: env
    errors shrink a task's trials instead of counting as failures. Returns the two
    dicts (keyed by ``str(k)``) and the number of tasks behind each k.
    """
    at: dict[str, float] = {}
    hat: dict[str, float] = {}
    used: dict[str, int] = {}
    for k in ks:
        usable = [(n, c) for n, c in per_task if n >= k]
        used[str(k)] = len(usable)
        if not usable:
            continue
        at[str(k)] = sum(pass_at_k(n, c, k) for n, c in usable) / len(usable)
        hat[str(k)] = sum(pass_hat_k(n, c, k) for n, c in usable) / len(usable)
    return at, hat, used


# -- evaluation metrics -------------------------------------------------------------------


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def episode_metrics(episodes: Sequence[Any], wall_s: float = 0.0) -> dict[str, Any]:
    """Every figure of the evaluation report for a set of episode results.

    ``episodes`` are :class:`~agentgym_envs.eval.evaluate.EpisodeResult` (or anything
    with the same attributes). Env-error episodes leave every rate's denominator; they
    are counted in ``env_errors``/``env_error_rate`` only. Tasks are keyed by (entry,
    task id), so the same task id in two entries (say, with and without faults) counts
    as two tasks.
    """
    valid = [e for e in episodes if e.valid]
    n = len(valid)
    wins = sum(e.success for e in valid)
    per_task: dict[tuple[str, str], list[int]] = {}  # [valid trials, successes, trials]
    for e in episodes:
        counts = per_task.setdefault((e.entry, e.task_id), [0, 0, 0])
        counts[2] += 1
        if e.valid:
            counts[0] += 1
            counts[1] += int(e.success)
    trials = max((c[2] for c in per_task.values()), default=0)
    at, hat, used = task_pass_rates([(c[0], c[1]) for c in per_task.values()], ks_for(trials))
    stages: dict[str, int] = {}
    for e in valid:
        for m in e.milestones:
            stages[m] = stages.get(m, 0) + 1
    outcomes: dict[str, int] = {}
    for e in episodes:
        outcomes[e.outcome] = outcomes.get(e.outcome, 0) + 1
    faulted = [e for e in valid if e.faults > 0]
    attacked = [e for e in valid if e.attack.get("planted")]
    total_cost = sum(e.cost for e in valid)
    lo, hi = wilson_interval(wins, n)
    return {
        "episodes": len(episodes),
        "valid": n,
        "tasks": len(per_task),
        "trials": trials,
        "successes": wins,
        "success_rate": wins / n if n else 0.0,
        "success_ci": [lo, hi],
        "stage_rates": {k: stages[k] / n for k in sorted(stages, key=_natural)} if n else {},
        "pass_at_k": at,
        "pass_hat_k": hat,
        "pass_k_tasks": used,
        "mean_steps": _mean([e.steps for e in valid]),
        "mean_tool_calls": _mean([e.tool_calls for e in valid]),
        "mean_tokens_in": _mean([e.tokens_in for e in valid]),
        "mean_tokens_out": _mean([e.tokens_out for e in valid]),
        "llm_failures": sum(e.llm_failures for e in episodes),
        "mean_return": _mean([e.reward for e in valid]),
        "wall_s": wall_s,
        "mean_episode_s": _mean([e.wall_ms / 1000.0 for e in episodes]),
        "mean_cost": total_cost / n if n else 0.0,
        "cost_per_success": total_cost / wins if wins else None,
        "violation_rate": sum(e.violations > 0 for e in valid) / n if n else 0.0,
        "env_errors": len(episodes) - n,
        "env_error_rate": (len(episodes) - n) / len(episodes) if episodes else 0.0,
        "fault_episodes": len(faulted),
        "recovery_rate": sum(e.success for e in faulted) / len(faulted) if faulted else None,
        "attack_episodes": len(attacked),
        "attack_success_rate": (
            sum(bool(e.attack.get("followed")) for e in attacked) / len(attacked)
            if attacked
            else None
        ),
        "attack_harm_rate": (
            sum(bool(e.attack.get("harm")) for e in attacked) / len(attacked) if attacked else None
        ),
        "loop_rate": sum(e.loops > 0 for e in valid) / n if n else 0.0,
        "outcomes": outcomes,
    }
