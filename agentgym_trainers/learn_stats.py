"""The learning proof over seeds: the distribution of a recipe's results and its verdict.

A recipe runs once per seed (the seed drives model initialisation, data order, env and
sampling seeds), so one run is a draw, not the result. These pure functions turn the
per-seed results (plain data: success per held-out task, per phase) into the reported
distribution: each seed's numbers, the mean RL gain with its spread, 95% intervals that
resample seeds and, within each seed, tasks, and the verdict against the recipe's bar.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from agentgym_envs.eval.metrics import wilson_interval

PerTask = Mapping[str, Sequence[int]]
"""Outcomes (1 success, 0 not) of each held-out task's episodes."""

PHASES = {"before_sft": "eval_initial", "after_sft": "eval_before", "after_rl": "eval_after"}
"""The held-out evaluations of a run (before SFT, after SFT: the RL start, after RL) and
their keys in a run's summary."""
PHASE_NAMES = tuple(PHASES)


def spread(values: Sequence[float]) -> dict[str, float]:
    """Mean, sample standard deviation (0 for one value), min and max of ``values``."""
    if not values:
        raise ValueError("spread of no values")
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1) if len(values) > 1 else 0.0
    return {
        "mean": round(mean, 4),
        "std": round(math.sqrt(var), 4),
        "min": round(min(values), 4),
        "max": round(max(values), 4),
    }


def phase_result(evaluation: dict[str, Any]) -> dict[str, Any]:
    """One phase's held-out result: success, its 95% interval over tasks (a bootstrap
    when per-task outcomes are known, else Wilson over episodes), episodes and tasks."""
    n = int(evaluation["valid_episodes"])
    wins = round(float(evaluation["success"]) * n)
    per_task = evaluation.get("per_task")
    if per_task:
        low, high = task_interval(per_task)
        method = "task bootstrap"
    else:
        low, high = wilson_interval(wins, n)
        method = "wilson over episodes"
    wilson = wilson_interval(wins, n)
    return {
        "success": wins / n if n else 0.0,
        "ci95": [round(low, 4), round(high, 4)],
        "ci_method": method,
        # the Wilson interval over episodes, as if they were independent: narrower than
        # the task bootstrap when tasks repeat (reported because it is the usual one)
        "wilson95": [round(wilson[0], 4), round(wilson[1], 4)],
        "n": n,
        "tasks": int(evaluation.get("tasks", 0)),
        "episodes": int(evaluation.get("episodes", n)),
        "split": evaluation["split"],
        "temperature": evaluation.get("temperature"),
        "wall_s": round(float(evaluation.get("wall_s", 0.0)), 1),
        "per_task": per_task or {},
    }


def algo_result(summary: dict[str, Any], wall_s: float) -> dict[str, Any]:
    """Phases, the RL gain over the SFT start and whether the intervals separate."""
    phases = {name: phase_result(summary[key]) for name, key in PHASES.items()}
    for name, key in PHASES.items():  # the greedy twin of a sampled evaluation
        if f"{key}_greedy" in summary:
            phases[name]["greedy"] = phase_result(summary[f"{key}_greedy"])
    start, end = phases["after_sft"], phases["after_rl"]
    greedy: dict[str, Any] = {}
    if "greedy" in start and "greedy" in end:
        g0, g1 = start["greedy"], end["greedy"]
        greedy = {
            "rl_gain_greedy": round(g1["success"] - g0["success"], 4),
            "intervals_separate_greedy": g1["ci95"][0] > g0["ci95"][1],
        }
    rl_seconds = float(summary.get("rl_seconds", 0.0))
    sft_done = int(summary.get("sft_steps_done", len(summary.get("sft_loss", []))))
    return {
        **phases,
        "sft_steps_done": sft_done,
        **sft_stop(summary, sft_done),
        "rl_gain": round(end["success"] - start["success"], 4),
        "intervals_separate": end["ci95"][0] > start["ci95"][1],
        "wilson_separate": end["wilson95"][0] > start["wilson95"][1],
        **greedy,
        "sft_seconds": round(float(summary.get("sft_seconds", 0.0)), 1),
        "rl_seconds": round(rl_seconds, 1),
        "rl_steps": int(summary.get("steps", 0)),
        "steps_per_hour": round(int(summary.get("steps", 0)) * 3600 / max(rl_seconds, 1e-9), 1),
        "wall_s": round(wall_s, 1),
        # where it ran (agentgym_trainers/provenance.py): a replay elsewhere may differ
        **({"platform": summary["platform"]} if "platform" in summary else {}),
    }


def sft_stop(summary: dict[str, Any], done: int) -> dict[str, Any]:
    """Whether SFT, ``done`` steps long, ended by the recipe's stop or ran into its cap
    (``sft_steps``) without meeting it: ``{"sft_capped": bool, "sft_last_check": success}``
    where a stop (a success or a loss threshold) is configured, else nothing. A capped
    seed's RL started from a policy that had not learned what the stop asks for."""
    config = summary.get("config", {})
    cap = int(config.get("sft_steps", 0))
    stop_success = float(config.get("sft_stop_success", 0.0))
    stop_loss = float(config.get("sft_stop_loss", 0.0))
    if cap <= 0 or not (stop_success or stop_loss):
        return {}
    checks = summary.get("sft_checks", [])
    last = float(checks[-1][1]) if checks else None
    met = done < cap or (bool(stop_success) and last is not None and last >= stop_success)
    return {"sft_capped": not met, "sft_last_check": last}


def two_stage_interval(
    per_seed: Sequence[PerTask],
    baseline: Sequence[PerTask] | None = None,
    resamples: int = 10_000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Mean success over seeds (minus ``baseline``'s, paired by seed and task) with a 95%
    percentile-bootstrap interval that resamples seeds and, within each, tasks.

    Seeds and tasks are the two sources of variation: a seed is a whole training run, a
    task is one held-out problem evaluated by every run of that seed. Each resample draws
    the seeds with replacement and, for each draw, that seed's tasks with replacement (a
    seed drawn twice gets two task draws); a seed's success is its drawn episodes' mean.
    With ``baseline`` (the same seeds' results on the same tasks, e.g. after SFT) each
    seed contributes its success minus the baseline's on the same drawn tasks.
    Deterministic (fixed ``seed``).

    Returns:
        ``(point, low, high)``; the point is the mean over seeds of each seed's success
        (or difference) on all its tasks.
    """
    import numpy as np

    if not per_seed:
        return (0.0, 0.0, 1.0) if baseline is None else (0.0, -1.0, 1.0)
    if baseline is not None and len(baseline) != len(per_seed):
        raise ValueError(f"baseline has {len(baseline)} seeds, per_seed {len(per_seed)}")
    rng = np.random.default_rng(seed)
    n_seeds = len(per_seed)
    tables = []  # per seed: (tasks, 4) wins and episodes after, wins and episodes before
    for i, after in enumerate(per_seed):
        before = baseline[i] if baseline is not None else {}
        tasks = sorted(set(after) & set(before)) if baseline is not None else sorted(after)
        if not tasks:
            raise ValueError(f"seed {i} has no held-out tasks (in common with its baseline)")
        rows = [
            [sum(after[t]), len(after[t]), sum(before.get(t, ())), len(before.get(t, ())) or 1]
            for t in tasks
        ]
        tables.append(np.array(rows, dtype=float))

    def rate(table: Any, picks: Any) -> Any:  # picks (R, T) -> (R,)
        got = table[picks]  # (R, T, 4)
        value = got[..., 0].sum(1) / got[..., 1].sum(1)
        if baseline is not None:
            value = value - got[..., 2].sum(1) / got[..., 3].sum(1)
        return value

    draws = rng.integers(0, n_seeds, size=(resamples, n_seeds))  # (R, S) seed picks
    total = np.zeros(resamples)
    for slot in range(n_seeds):
        # every seed's task-resampled success for this slot, then the one this slot drew
        per = np.stack(
            [rate(t, rng.integers(0, len(t), size=(resamples, len(t)))) for t in tables]
        )  # (S, R)
        total += per[draws[:, slot], np.arange(resamples)]
    low, high = np.quantile(total / n_seeds, [0.025, 0.975])
    points = [float(rate(t, np.arange(len(t))[None, :])[0]) for t in tables]
    return sum(points) / n_seeds, float(low), float(high)


def pooled(per_seed: Mapping[str, PerTask]) -> dict[str, list[int]]:
    """Per-task outcomes of several seeds as one table, keyed ``<seed>/<task>``."""
    return {f"{s}/{task}": list(v) for s, table in per_seed.items() for task, v in table.items()}


def distribution(seeds: Mapping[str, Mapping[str, Any]], bar: float) -> dict[str, Any]:
    """The distribution over seeds of one algorithm's results, and its verdict.

    Args:
        seeds: each seed's result, keyed by seed: ``before_sft``, ``after_sft`` and
            ``after_rl``, each with ``success`` and ``per_task`` (and optionally a
            ``greedy`` twin of the same form).
        bar: the least mean RL gain (after RL minus after SFT success) that passes.

    Returns:
        For each phase the per-seed success, its spread and its two-stage interval
        (:func:`two_stage_interval`); the RL gain per seed with its spread and the
        paired two-stage interval of after RL minus after SFT; the same gain for greedy
        decoding where every seed has it; and :func:`verdict`.
    """
    order = sorted(seeds, key=lambda s: (len(s), s))
    out: dict[str, Any] = {"seeds": order, "n_seeds": len(order)}
    for phase in PHASE_NAMES:
        tables = [seeds[s][phase]["per_task"] for s in order]
        values = [float(seeds[s][phase]["success"]) for s in order]
        _, low, high = two_stage_interval(tables)
        out[phase] = {"per_seed": values, **spread(values), "ci95": [round(low, 4), round(high, 4)]}
    gains = [seeds[s]["after_rl"]["success"] - seeds[s]["after_sft"]["success"] for s in order]
    _, low, high = two_stage_interval(
        [seeds[s]["after_rl"]["per_task"] for s in order],
        [seeds[s]["after_sft"]["per_task"] for s in order],
    )
    out["rl_gain"] = {
        "per_seed": [round(g, 4) for g in gains],
        **spread(gains),
        "paired_ci95": [round(low, 4), round(high, 4)],
    }
    if all("greedy" in seeds[s][p] for s in order for p in ("after_sft", "after_rl")):
        greedy = [
            seeds[s]["after_rl"]["greedy"]["success"] - seeds[s]["after_sft"]["greedy"]["success"]
            for s in order
        ]
        out["rl_gain_greedy"] = {"per_seed": [round(g, 4) for g in greedy], **spread(greedy)}
    out["verdict"] = verdict(gains, out["after_sft"]["ci95"], out["after_rl"]["ci95"], bar)
    return out


MIN_SEEDS = 3
"""The fewest seeds whose distribution a verdict can pass."""


def verdict(
    gains: Sequence[float],
    sft_ci: Sequence[float],
    rl_ci: Sequence[float],
    bar: float,
) -> dict[str, Any]:
    """Whether a recipe passes: it ran at least :data:`MIN_SEEDS` seeds (one or two
    runs are anecdotes, however large their gain), its mean RL gain over them is at least
    ``bar``, every seed gains (> 0), and the 95% intervals of after-SFT and after-RL
    success (over seeds and tasks) are apart, the after-RL one above.

    Returns:
        ``passes`` and each check by name, with the bar and the number of seeds.
    """
    if not gains:
        raise ValueError("a verdict needs at least one seed's gain")
    mean = sum(gains) / len(gains)
    checks = {
        "enough_seeds": len(gains) >= MIN_SEEDS,
        "mean_gain_meets_bar": mean >= bar - 1e-9,
        "every_seed_gains": all(g > 0 for g in gains),
        "intervals_apart": rl_ci[0] > sft_ci[1],
    }
    return {"passes": all(checks.values()), **checks, "bar": bar, "n_seeds": len(gains)}


def task_interval(
    per_task: dict[str, list[int]], resamples: int = 10_000, seed: int = 0
) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the success rate, resampling *tasks*.

    Episodes of one task are not independent (the held-out split may have fewer tasks
    than episodes, and a greedy policy repeats itself exactly), so the unit of
    resampling is the task: each resample draws tasks with replacement and averages
    their episodes. Deterministic (fixed seed).
    """
    import numpy as np

    if not per_task:
        return (0.0, 1.0)
    wins = np.array([sum(v) for v in per_task.values()], dtype=float)
    counts = np.array([len(v) for v in per_task.values()], dtype=float)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(wins), size=(resamples, len(wins)))
    rates = wins[picks].sum(axis=1) / counts[picks].sum(axis=1)
    low, high = np.quantile(rates, [0.025, 0.975])
    return float(low), float(high)


def paired_difference(
    before: dict[str, list[int]],
    after: dict[str, list[int]],
    resamples: int = 10_000,
    seed: int = 0,
) -> tuple[float, float, float]:
    """Success of ``after`` minus ``before`` on the tasks both evaluated, with a 95%
    percentile-bootstrap interval that resamples tasks (both runs use the same held-out
    tasks and env seeds, so the difference is paired by task). Deterministic."""
    import numpy as np

    tasks = sorted(set(before) & set(after))
    if not tasks:
        return 0.0, -1.0, 1.0
    a = np.array([[sum(before[t]), len(before[t])] for t in tasks], dtype=float)
    b = np.array([[sum(after[t]), len(after[t])] for t in tasks], dtype=float)
    picks = np.random.default_rng(seed).integers(0, len(tasks), size=(resamples, len(tasks)))
    diffs = b[picks, 0].sum(1) / b[picks, 1].sum(1) - a[picks, 0].sum(1) / a[picks, 1].sum(1)
    low, high = np.quantile(diffs, [0.025, 0.975])
    point = b[:, 0].sum() / b[:, 1].sum() - a[:, 0].sum() / a[:, 1].sum()
    return float(point), float(low), float(high)


def combine(per_seed: dict[str, dict[str, Any]], bar: float) -> dict[str, Any]:
    """One algorithm's result over seeds (each an :func:`algo_result`, keyed by seed).

    The phases pool the seeds' episodes (per-task outcomes keyed ``<seed>/<task>``): their
    success is the mean over seeds (every seed evaluates as many episodes), their ``ci95``
    the interval over seeds and tasks (:func:`two_stage_interval`);
    ``rl_gain`` is the mean gain. ``distribution`` has every seed's numbers, the spread
    and the verdict against ``bar``; ``seeds`` each seed's own result.
    """
    first = per_seed[next(iter(per_seed))]

    def pool(get: Any) -> dict[str, Any]:
        tables = {s: get(r)["per_task"] for s, r in per_seed.items()}
        merged = pooled(tables)
        outcomes = [x for v in merged.values() for x in v]
        _, low, high = two_stage_interval(list(tables.values()))
        wilson = wilson_interval(sum(outcomes), len(outcomes))
        return {
            **{k: v for k, v in get(first).items() if k in ("split", "temperature")},
            "success": round(sum(outcomes) / max(len(outcomes), 1), 6),
            "ci95": [round(low, 4), round(high, 4)],
            "ci_method": "seed and task bootstrap",
            "wilson95": [round(wilson[0], 4), round(wilson[1], 4)],
            "n": len(outcomes),
            "tasks": len(merged),
            "episodes": sum(int(get(r).get("episodes", 0)) for r in per_seed.values()),
            "wall_s": round(sum(float(get(r).get("wall_s", 0.0)) for r in per_seed.values()), 1),
            "per_task": merged,
        }

    phases: dict[str, Any] = {}
    for phase in PHASE_NAMES:
        phases[phase] = pool(lambda r, p=phase: r[p])
        if all("greedy" in r[phase] for r in per_seed.values()):
            phases[phase]["greedy"] = pool(lambda r, p=phase: r[p]["greedy"])
    start, end = phases["after_sft"], phases["after_rl"]
    greedy: dict[str, Any] = {}
    if "greedy" in start and "greedy" in end:
        greedy = {
            "rl_gain_greedy": round(end["greedy"]["success"] - start["greedy"]["success"], 4),
            "intervals_separate_greedy": end["greedy"]["ci95"][0] > start["greedy"]["ci95"][1],
        }
    dist = distribution(per_seed, bar)
    rl_seconds = sum(r["rl_seconds"] for r in per_seed.values())
    rl_steps = sum(r["rl_steps"] for r in per_seed.values())
    return {
        **phases,
        "rl_gain": round(end["success"] - start["success"], 4),
        "intervals_separate": end["ci95"][0] > start["ci95"][1],
        "wilson_separate": end["wilson95"][0] > start["wilson95"][1],
        **greedy,
        "verdict": dist["verdict"],
        "distribution": dist,
        "sft_seconds": round(sum(r["sft_seconds"] for r in per_seed.values()), 1),
        "rl_seconds": round(rl_seconds, 1),
        "rl_steps": rl_steps,
        "steps_per_hour": round(rl_steps * 3600 / max(rl_seconds, 1e-9), 1),
        "wall_s": round(sum(r["wall_s"] for r in per_seed.values()), 1),
        **({"platform": first["platform"]} if "platform" in first else {}),
        "seeds": per_seed,
    }
