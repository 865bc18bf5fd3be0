"""Pure metric functions over episodes
(:class:`~agentgym_envs.core.episode.EpisodeSummary`)."""

from __future__ import annotations

import math
import re
from collections.abc import Hashable, Sequence
from typing import Any

from agentgym_envs.core.episode import EpisodeSummary, Truncation
from agentgym_envs.core.errors import ArgumentError


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


# -- per-task estimators over repeated trials -------------------------------------------


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k of one task: the chance that at least one of ``k`` trials drawn
    without replacement from ``n`` (of which ``c`` succeeded) succeeds.

    ``1 - C(n-c, k) / C(n, k)`` (Chen et al., 2021); with ``n == k`` it is simply whether
    any trial succeeded.

    Raises:
        ArgumentError: ``k`` outside ``1..n`` or ``c`` outside ``0..n``.
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
        ArgumentError: ``k`` outside ``1..n`` or ``c`` outside ``0..n`` (a ValueError).
    """
    _check_trials(n, c, k)
    return math.comb(c, k) / math.comb(n, k)


def _check_trials(n: int, c: int, k: int) -> None:
    if not 0 <= c <= n:
        raise ArgumentError(f"successes must be in 0..{n} (the trials of the task), got {c}")
    if not 1 <= k <= n:
        raise ArgumentError(f"k must be in 1..{n} (the trials of the task), got {k}")


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


def episode_metrics(
    episodes: Sequence[EpisodeSummary],
    wall_s: float = 0.0,
    *,
    task_keys: Sequence[Hashable] | None = None,
) -> dict[str, Any]:
    """Every figure of a set of episodes: the one metrics function of ``agentgym run``,
    ``agentgym eval`` and the trainer.

    Env-error (invalid) episodes leave every rate's denominator; they are counted in
    ``env_errors``/``env_error_rate`` only. Where some episode had an LLM user, the
    figures also hold ``user_llm`` (:func:`user_llm_metrics`).

    Args:
        episodes: the episodes.
        wall_s: the wall time they took together (reported as is).
        task_keys: what makes two episodes trials of the same task, one per episode, for
            pass@k and pass^k (default: the task id; the evaluator passes (entry, task
            id), so one task in two suite entries counts as two tasks).

    Raises:
        ArgumentError: ``task_keys`` is not one key per episode.
    """
    keys: Sequence[Hashable] = task_keys if task_keys is not None else [e.task_id for e in episodes]
    if len(keys) != len(episodes):
        raise ArgumentError(
            f"task_keys needs one key per episode: got {len(keys)} for {len(episodes)} episodes"
        )
    valid = [e for e in episodes if e.valid]
    n = len(valid)
    wins = sum(e.success for e in valid)
    per_task: dict[Hashable, list[int]] = {}  # [valid trials, successes, trials]
    for key, e in zip(keys, episodes, strict=True):
        counts = per_task.setdefault(key, [0, 0, 0])
        counts[2] += 1
        if e.valid:
            counts[0] += 1
            counts[1] += int(e.success)
    trials = max((c[2] for c in per_task.values()), default=0)
    at, hat, used = task_pass_rates([(c[0], c[1]) for c in per_task.values()], ks_for(trials))
    stages = _counts(m for e in valid for m in e.milestones)
    outcomes = _counts(e.outcome.value for e in episodes)
    truncations = _counts(e.truncation.value for e in valid if e.truncation is not Truncation.NONE)
    components = sorted({k for e in valid for k in e.reward_components})
    faulted = [e for e in valid if e.faults > 0]
    attacked = [e for e in valid if e.attack.get("planted")]
    total_cost = sum(e.cost_total for e in valid)
    lo, hi = wilson_interval(wins, n)
    user = user_llm_metrics(episodes)
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
        "mean_reward_components": {
            k: _mean([e.reward_components.get(k, 0.0) for e in valid]) for k in components
        },
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
        "truncations": truncations,
        **({"user_llm": user} if user is not None else {}),
    }


def user_llm_metrics(episodes: Sequence[EpisodeSummary]) -> dict[str, Any] | None:
    """How the LLM user's voice and reader did over the episodes that had one (env
    errors included: a user-side failure is one), or None where none had one.

    ``episodes`` counts the episodes with the LLM user; ``failures`` those a user-side
    failure ended; the other counts add up the episodes' ``info["user_llm"]`` counters.
    ``first_draw_rate`` and ``fallback_rate`` are per voiced reply (None without one).
    """
    users = [e.user_llm for e in episodes if e.user_llm is not None]
    if not users:
        return None
    replies = sum(u.replies for u in users)
    first, fallbacks = sum(u.first_draw_pass for u in users), sum(u.fallbacks for u in users)
    return {
        "episodes": len(users),
        "replies": replies,
        "first_draw_pass": first,
        "first_draw_rate": first / replies if replies else None,
        "redraws": sum(u.redraws for u in users),
        "fallbacks": fallbacks,
        "fallback_rate": fallbacks / replies if replies else None,
        "failures": sum(u.failures > 0 for u in users),
        "reads": sum(u.reads for u in users),
        "read_fallbacks": sum(u.read_fallbacks for u in users),
        "disagreements": sum(u.disagreements for u in users),
        "cassette_misses": sum(u.cassette_misses for u in users),
    }


def _counts(items: Any) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return out


# -- display ------------------------------------------------------------------------------


def shown(value: float, spec: str) -> str:
    """``value`` formatted by ``spec`` for a table, never as a negative zero.

    Reports keep the exact figures; only their display is rounded, and a figure that
    rounds to zero (``-0.0``, ``-1e-17``) shows as ``0.0`` (``+0.0`` with a ``+`` spec).

    Example:
        >>> shown(-1e-17, ".1f"), shown(3.4000000000000004, ".4g"), shown(-0.0, "+.3f")
        ('0.0', '3.4', '+0.000')
    """
    text = format(value, spec)
    mantissa = re.split(r"[eE]", text)[0]
    if "-" in mantissa and not any(c in "123456789" for c in mantissa):
        text = text.replace("-", "+" if "+" in spec else "", 1)
    return text


def tidy(value: Any, digits: int = 12) -> Any:
    """``value`` (JSON-like data) with each float rounded to ``digits`` significant digits
    and negative zeros made 0.0, for display: ``3.4000000000000004`` shows as ``3.4``."""
    if isinstance(value, float):
        return float(f"{value:.{digits}g}") + 0.0 if math.isfinite(value) else value
    if isinstance(value, dict):
        return {k: tidy(v, digits) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [tidy(v, digits) for v in value]
    return value
