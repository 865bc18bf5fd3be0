"""The CPU learning proof: a weak SFT warm start, then RL, on held-out tasks.

``python -m agentgym_trainers.learn`` (``make learn``) runs each committed recipe (the files
``agentgym_trainers/configs/*.toml``, read by :mod:`agentgym_trainers.recipes`; a copy is run
by its path) for GRPO, RLOO and PPO from the same small model and the same SFT warm start,
and writes ``docs/results/cpu/<recipe>/``:

* ``summary.json``: for each algorithm and phase (``before_sft``, ``after_sft``,
  ``after_rl``) the held-out success, its 95% Wilson interval, ``n``, the split and the
  wall time; the gain of RL over the SFT start and whether the two intervals overlap;
  the recipe and the exact commands that produced it;
* ``metrics.jsonl``: every logged row of every run, with its ``algo``;
* ``curves.png``: training success and return of the three algorithms on one plot,
  and the held-out success of each phase with its interval.

Every run is deterministic on one CPU platform: fixed model initialisation, task
sampling, env and sampling seeds, one torch thread. Each result records its platform
(:mod:`agentgym_trainers.provenance`): on another CPU or package version the kernels
round differently, the runs part after a few hundred steps, and only the statistical
claims (the gain and its intervals) are expected to hold.

``--rollout async --max-lag K`` trains the same recipe with asynchronous rollouts
(:mod:`agentgym_trainers.async_rollout`); its results are stored next to the synchronous
ones under the key ``<algo>-async`` (``<algo>-async-lagK`` for ``K != 1``), and the
README compares the two: RL steps per hour and the held-out success difference with a
paired 95% interval over tasks. Async runs are not deterministic (thread timing decides
which weights sample each turn), except with ``--max-lag 0``, which is the synchronous
schedule.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import fcntl
import json
import logging
import shlex
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.eval.metrics import wilson_interval
from agentgym_trainers.recipes import RECIPES, Recipe, find_recipe
from agentgym_trainers.run import train
from agentgym_trainers.runlog import read_metrics

log = logging.getLogger(__name__)

PHASES = {"before_sft": "eval_initial", "after_sft": "eval_before", "after_rl": "eval_after"}
RESULTS = Path("docs/results/cpu")


def build_model(recipe: Recipe, folder: Path) -> Path:
    """Write the recipe's randomly initialised model (and tokenizer) to ``folder``, once
    (concurrent calls wait for the first)."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with _locked(folder.parent / ".model.lock"):
        if not (folder / "config.json").is_file():
            _write_model(recipe, folder)
    return folder


def _write_model(recipe: Recipe, folder: Path) -> None:
    from agentgym_envs.llm.models import load_tokenizer, tiny_llama
    from agentgym_trainers.vocab import fit_tokenizer

    shape = recipe.model
    if shape.vocab_size:
        tokenizer = fit_tokenizer(
            recipe.train["env"],
            env_kwargs=recipe.train.get("env_kwargs"),
            difficulty=recipe.train.get("difficulty"),
            vocab_size=shape.vocab_size,
            seed=shape.seed,
        )
    else:
        tokenizer = load_tokenizer("tiny")
    model = tiny_llama(
        tokenizer,
        seed=shape.seed,
        hidden_size=shape.hidden_size,
        num_layers=shape.num_layers,
        num_heads=shape.num_heads,
        num_kv_heads=shape.num_kv_heads,
        intermediate_size=shape.intermediate_size,
    )
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp))
    tokenizer.save_pretrained(str(tmp))
    tmp.rename(folder)


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
    return {
        **phases,
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


def result_key(algo: str, rollout: str = "sync", max_lag: int = 1) -> str:
    """The name a run's results are stored under: the algorithm, with ``-async`` (and
    ``-lagK`` unless K is 1) for asynchronous rollouts, so both sit side by side."""
    if rollout == "sync":
        return algo
    return f"{algo}-async" if max_lag == 1 else f"{algo}-async-lag{max_lag}"


def base_algo(key: str) -> str:
    """The algorithm of a result key (``grpo-async`` -> ``grpo``)."""
    return key.split("-", 1)[0]


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


def run_recipe(
    recipe: Recipe,
    out: Path,
    work: Path,
    algos: Sequence[str] | None = None,
    command: str = "",
    from_runs: bool = False,
    rollout: str = "sync",
    max_lag: int = 1,
    **overrides: Any,
) -> dict[str, Any]:
    """Run ``recipe`` for each algorithm and write summary, metrics and curves to ``out``.

    With ``from_runs`` nothing is trained: the results are rebuilt from the finished run
    folders in ``work`` (their ``summary.json`` and ``metrics.jsonl``); the wall time is
    then the run's own ``train_seconds`` (evaluations, SFT and RL; not model loading).
    With ``rollout="async"`` each algorithm trains with asynchronous rollouts and
    ``max_lag``; its results go under :func:`result_key` (``grpo-async``), next to the
    synchronous ones of the same recipe and config.
    """
    chosen = tuple(algos or recipe.algos)
    unknown = [a for a in chosen if a not in recipe.algos]
    if unknown:
        raise ConfigError(f"recipe {recipe.name!r} has no algorithm {unknown}; use {recipe.algos}")
    if rollout not in ("sync", "async"):
        raise ConfigError(f"rollout must be 'sync' or 'async', got {rollout!r}")
    if "rollout" in overrides or (rollout == "async" and "max_lag" in overrides):
        raise ConfigError(
            "set the rollout mode with --rollout/--max-lag, not --set: the results' name "
            "(grpo or grpo-async) follows from them"
        )
    mode = {} if rollout == "sync" else {"rollout": "async", "max_lag": max_lag}
    config = {**dataclasses.asdict(recipe), "overrides": overrides}
    model = str(build_model(recipe, work / "model0"))
    results: dict[str, Any] = {}
    rows: list[dict[str, Any]] = []
    for algo in chosen:
        key = result_key(algo, rollout, max_lag)
        run_dir = work / key
        if from_runs:
            summary = json.loads((run_dir / "summary.json").read_text())
            results[key] = algo_result(summary, float(summary["train_seconds"]))
        else:
            shutil.rmtree(run_dir, ignore_errors=True)  # a rerun must not append to old rows
            start = time.perf_counter()
            summary = train(recipe.config(algo, model, run_dir, **overrides, **mode))
            results[key] = algo_result(summary, time.perf_counter() - start)
        if mode:
            results[key]["rollout"] = mode
        results[key]["command"] = command
        rows += [{"algo": key, **row} for row in read_metrics(run_dir / "metrics.jsonl")]
        log.info("%s %s: %s", recipe.name, key, json.dumps(results[key]))
    # algorithms run by other calls of the same recipe and config are kept (read when
    # this call ends), so the three can run in separate or concurrent calls
    out.mkdir(parents=True, exist_ok=True)
    with _locked(work / ".results.lock"):  # concurrent calls merge in turn
        results, rows, commands = _merge(out, config, results, rows)
        order = {a: i for i, a in enumerate(recipe.algos)}
        results = {
            k: results[k]
            for k in sorted(results, key=lambda k: (order.get(base_algo(k), len(order)), k))
            if base_algo(k) in order
        }
        primary = recipe.primary if recipe.primary in results else next(iter(results))
        report = {
            "recipe": recipe.name,
            "commands": _commands(results, commands),
            "rebuilt_from_runs": from_runs,
            "primary": primary,
            **{k: results[primary][k] for k in PHASES},
            "algos": results,
            "config": config,
        }
        (out / "summary.json").write_text(json.dumps(report, indent=2) + "\n")
        with (out / "metrics.jsonl").open("w") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")
        plot(report, rows, out / "curves.png")
        (out / "README.md").write_text(markdown(report, recipe.why))
    return report


def markdown(report: dict[str, Any], why: str = "") -> str:
    """``README.md`` of a results folder, generated from its summary (never typed)."""

    def cell(phase: dict[str, Any]) -> str:
        low, high = phase["ci95"]
        return f"{phase['success']:.3f} [{low:.3f}, {high:.3f}]"

    temperature = report["config"]["train"].get("eval_temperature", 0.0)
    lines = [
        f"# {report['recipe']}: SFT warm start, then RL, on CPU",
        "",
        "Generated by `agentgym_trainers.learn` from `summary.json`; produced by:",
        "",
        *[f"    {c}" for c in report.get("commands", [])],
        "",
        f"Held-out success on `{report['after_rl']['split']}` "
        f"({report['after_rl']['n']} episodes over {report['after_rl'].get('tasks', '?')} "
        f"tasks per phase), sampled at temperature {temperature}, with a 95% interval "
        f"({report['after_rl'].get('ci_method', 'wilson')}); greedy decoding of the same "
        "policies in the last columns. 'apart' says whether the after-RL interval lies "
        "above the after-SFT one, for the task bootstrap (the interval shown; episodes of "
        "one task are not independent) and for the Wilson interval over episodes.",
        "",
        "| algo | before SFT | after SFT | after RL | RL gain | apart (task / Wilson) "
        "| greedy after SFT | greedy after RL | greedy gain | wall s |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for algo, res in report["algos"].items():
        greedy = [
            cell(res[p]["greedy"]) if "greedy" in res[p] else "-" for p in ("after_sft", "after_rl")
        ]
        gain = res.get("rl_gain_greedy")
        greedy.append("-" if gain is None else f"{gain:+.3f}")
        lines.append(
            f"| {algo} | {cell(res['before_sft'])} | {cell(res['after_sft'])} "
            f"| {cell(res['after_rl'])} | {res['rl_gain']:+.3f} "
            f"| {_yes(res['intervals_separate'])} / {_yes(res.get('wilson_separate'))} "
            f"| {greedy[0]} | {greedy[1]} | {greedy[2]} | {res['wall_s']:.0f} |"
        )
    lines += _async_comparison(report["algos"])
    lines += ["", "![curves](curves.png)", ""]
    if why:
        lines += ["## Why this recipe", "", why, ""]
    return "\n".join(lines)


def _yes(flag: bool | None) -> str:
    return "-" if flag is None else "yes" if flag else "no"


def _async_comparison(algos: dict[str, Any]) -> list[str]:
    """README lines comparing each asynchronous run with the synchronous run of the same
    algorithm: RL steps per hour (the speedup) and the held-out success difference after
    RL, with a paired 95% interval over tasks."""
    pairs = [(k, base_algo(k)) for k in algos if k != base_algo(k) and base_algo(k) in algos]
    if not pairs:
        return []
    lines = [
        "",
        "Asynchronous vs synchronous rollouts (same recipe and seeds): RL steps per hour, "
        "and the held-out success after RL minus the synchronous run's, with a paired 95% "
        "interval (task bootstrap).",
        "",
        "| run | max lag | steps/h | sync steps/h | speedup | success diff [95% CI] "
        "| greedy diff [95% CI] |",
        "|---|---|---|---|---|---|---|",
    ]
    for key, base in pairs:
        a, s = algos[key], algos[base]
        fast, slow = a.get("steps_per_hour", 0.0), s.get("steps_per_hour", 0.0)
        cells = []
        for get in (lambda r: r["after_rl"], lambda r: r["after_rl"].get("greedy")):
            mine, theirs = get(a), get(s)
            if not (mine and theirs):
                cells.append("-")
                continue
            diff, low, high = paired_difference(theirs["per_task"], mine["per_task"])
            cells.append(f"{diff:+.3f} [{low:+.3f}, {high:+.3f}]")
        lag = a.get("rollout", {}).get("max_lag", "?")
        speedup = f"{fast / slow:.2f}x" if slow else "-"
        lines.append(
            f"| {key} | {lag} | {fast:.0f} | {slow:.0f} | {speedup} | {cells[0]} | {cells[1]} |"
        )
    return lines


def _merge(
    out: Path, config: dict[str, Any], results: dict[str, Any], rows: list[dict[str, Any]]
) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
    """This call's results and rows joined with those of other algorithms already in
    ``out`` for the same recipe and config (replaced if the config differs)."""
    path = out / "summary.json"
    old = json.loads(path.read_text()) if path.is_file() else {}
    if _settings(old.get("config", {})) != _settings(json.loads(json.dumps(config))):
        old = {}
    keep = {a: r for a, r in old.get("algos", {}).items() if a not in results}
    metrics = out / "metrics.jsonl"
    kept = read_metrics(metrics) if keep and metrics.is_file() else []
    kept_rows = [r for r in kept if r.get("algo") in keep]
    merged = {**keep, **results}
    # the commands behind the results kept (none when this call replaces them all)
    commands = old.get("commands") or ([old["command"]] if old.get("command") else [])
    commands = commands if keep else []
    return merged, kept_rows + rows, list(commands)


def _commands(results: dict[str, Any], legacy: Sequence[str]) -> list[str]:
    """The commands behind ``results``, each once: every result names its own (a rerun
    replaces its algorithm's command); results from before that kept only the summary's
    list (``legacy``), which is then kept too."""
    own = [r["command"] for r in results.values() if r.get("command")]
    older = list(legacy) if any(not r.get("command") for r in results.values()) else []
    return list(dict.fromkeys([*older, *own]))


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _settings(config: dict[str, Any]) -> dict[str, Any]:
    """What decides a run's numbers: the config without its explanation text."""
    return {k: v for k, v in config.items() if k != "why"}


def smooth(values: Sequence[float], window: int) -> list[float]:
    """The rolling mean of the last ``window`` values at each position (fewer at the
    start)."""
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v - (values[i - window] if i >= window else 0.0)
        out.append(total / min(i + 1, window))
    return out


def plot(report: dict[str, Any], rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """Training curves of every algorithm on one figure, and the held-out phases."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(15, 4.2))
    FigureCanvasAgg(fig)
    train_ax, return_ax, eval_ax = fig.subplots(1, 3)
    algos = list(report["algos"])
    for algo in algos:
        rl = [r for r in rows if r["algo"] == algo and r.get("phase") == "rl"]
        steps = [r["step"] for r in rl]
        train_ax.plot(steps, smooth([r["success"] for r in rl], 5), label=algo)
        return_ax.plot(steps, smooth([r["reward"] for r in rl], 5), label=algo)
    train_ax.set(title="training success (rolling mean of 5 steps)", xlabel="RL step")
    return_ax.set(title="training return (rolling mean of 5 steps)", xlabel="RL step")
    width = 0.8 / max(len(algos), 1)
    for i, algo in enumerate(algos):
        res = report["algos"][algo]
        xs = [j + (i - (len(algos) - 1) / 2) * width for j in range(len(PHASES))]
        ys = [res[p]["success"] for p in PHASES]
        err = [
            [y - res[p]["ci95"][0] for p, y in zip(PHASES, ys, strict=True)],
            [res[p]["ci95"][1] - y for p, y in zip(PHASES, ys, strict=True)],
        ]
        eval_ax.bar(xs, ys, width, yerr=err, capsize=3, label=algo)
    last = report["algos"][algos[0]]["after_rl"] if algos else {}
    method = last.get("ci_method", "wilson over episodes")
    eval_ax.set_xticks(range(len(PHASES)), list(PHASES))
    eval_ax.set(
        title=f"held-out success, 95% interval\n({method}; {last.get('n', 0)} episodes, "
        f"{last.get('tasks', '?')} tasks)",
        ylim=(0, 1),
    )
    for ax in (train_ax, return_ax, eval_ax):
        ax.legend()
        ax.grid(alpha=0.3)
    fig.suptitle(f"{report['recipe']}: SFT warm start, then RL (CPU)")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    return path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentgym_trainers.learn", description=__doc__)
    parser.add_argument(
        "recipes",
        nargs="*",
        default=list(RECIPES),
        help=f"recipe names ({', '.join(RECIPES)}; default: all) or the paths of recipe files "
        "(copies of agentgym_trainers/configs/*.toml)",
    )
    parser.add_argument("--algos", nargs="+", help="algorithms (default: the recipe's)")
    parser.add_argument("--out", default=str(RESULTS), help="results folder")
    parser.add_argument("--work", default="runs/learn", help="run folders")
    parser.add_argument(
        "--from-runs",
        action="store_true",
        help="train nothing: rebuild the results from the finished run folders in --work",
    )
    parser.add_argument(
        "--rollout",
        choices=("sync", "async"),
        default="sync",
        help="async: train with asynchronous rollouts; results are stored as <algo>-async",
    )
    parser.add_argument(
        "--max-lag",
        type=int,
        default=1,
        help="with --rollout async: the largest policy lag trained on (default: 1)",
    )
    parser.add_argument(
        "--set",
        nargs="+",
        default=[],
        metavar="FIELD=JSON",
        help="override recipe fields, e.g. --set steps=10 lr=2e-3 (results then say so)",
    )
    args = parser.parse_args(argv)
    overrides = dict(_override(item) for item in args.set)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    import torch

    # one thread per process, as the committed results were made (float sums, and so the
    # sampled tokens, depend on the thread count; two threads on a shared 2-core box are
    # also slower)
    torch.set_num_threads(1)
    command = shlex.join(["python", "-m", "agentgym_trainers.learn", *(argv or sys.argv[1:])])
    for recipe in [find_recipe(name) for name in args.recipes]:  # all checked first
        run_recipe(
            recipe,
            Path(args.out) / recipe.name,
            Path(args.work) / recipe.name,
            args.algos,
            command=command,
            from_runs=args.from_runs,
            rollout=args.rollout,
            max_lag=args.max_lag,
            **overrides,
        )
    return 0


def _override(item: str) -> tuple[str, Any]:
    name, sep, text = item.partition("=")
    if not sep:
        raise ConfigError(f"--set takes FIELD=JSON, got {item!r} (e.g. --set steps=10)")
    try:
        return name.replace("-", "_"), json.loads(text)
    except json.JSONDecodeError:
        return name.replace("-", "_"), text


if __name__ == "__main__":
    raise SystemExit(main())
