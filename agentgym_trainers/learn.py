"""The CPU learning proof: a weak SFT warm start, then RL, on held-out tasks, over seeds.

``python -m agentgym_trainers.learn`` (``make learn``) runs each committed recipe (the files
``agentgym_trainers/configs/*.toml``, read by :mod:`agentgym_trainers.recipes`; a copy is run
by its path) for its primary algorithm (``--algos`` picks others: GRPO, RLOO, PPO) once per
seed (``--seeds``, default 3), ``--jobs`` runs at a time (default: one per core, each a
process at one torch thread), printing progress lines as it goes (also in
``<work>/progress.log``), and writes ``docs/results/cpu/<recipe>/``:

* ``summary.json``: for each algorithm every seed's held-out success before SFT, after SFT
  and after RL (with its 95% task-bootstrap interval, ``n``, the split and the wall time)
  and RL gain; their distribution (:mod:`agentgym_trainers.learn_stats`): the mean gain,
  its spread (std, min, max), 95% intervals that resample seeds and, within each, tasks,
  paired for the gain; and the verdict against the recipe's ``bar`` (mean gain at least
  the bar, every seed gaining, the after-SFT and after-RL intervals apart); the recipe
  and the exact commands that produced it;
* ``metrics.jsonl``: every logged row of every run, with its ``algo`` and ``seed``;
* ``curves.png``: training success and return of every run, and the held-out success of
  each phase over seeds with its interval;
* ``README.md``: the verdict, the platform and the distribution first, then every seed.

A seed moves the model's initialisation, the SFT data order and the task, env and
sampling seeds; seed 0 is the recipe as written. Every run is deterministic on one CPU
platform (one torch thread). Each result records its platform
(:mod:`agentgym_trainers.provenance`): on another CPU or package version the kernels round
differently, the runs part after a few hundred steps, and only the distribution (the mean
gain within its spread, and the verdict) is expected to hold. The exit status is 0 when
every recipe's verdict passes.

``--train-seeds 2`` trains only seed 2 here: the seeds of one command can be split between
processes or machines. Each other seed's run is read from its folder in ``--work`` once it
has finished there with the same settings (copy it in), and the results are written when
every seed's run is in; until then the command says which seeds it waits for and exits 3
(0 and 1 are the verdict's). Its results name the command of every seed's run.

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
import os
import shlex
import shutil
import signal
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentgym_envs.core.errors import ConfigError
from agentgym_trainers.learn_report import base_algo as base_algo
from agentgym_trainers.learn_report import markdown as markdown
from agentgym_trainers.learn_report import plot as plot
from agentgym_trainers.learn_report import verdict_lines
from agentgym_trainers.learn_stats import PHASES as PHASES
from agentgym_trainers.learn_stats import algo_result as algo_result
from agentgym_trainers.learn_stats import combine

# re-exported: compare.py and the tests take them from here
from agentgym_trainers.learn_stats import paired_difference as paired_difference
from agentgym_trainers.learn_stats import task_interval as task_interval
from agentgym_trainers.recipes import RECIPES, Recipe, find_recipe
from agentgym_trainers.run import ProgressEvent, train
from agentgym_trainers.runlog import read_metrics
from agentgym_trainers.workers import Terminated, run_all

log = logging.getLogger(__name__)

RESULTS = Path("docs/results/cpu")
WAITING = 3
"""learn's exit status while a recipe's results wait for seeds trained elsewhere."""


def build_model(recipe: Recipe, folder: Path, init_seed: int | None = None) -> Path:
    """Write the recipe's randomly initialised model (and tokenizer) to ``folder``, once
    (concurrent calls wait for the first). ``init_seed`` (default: the recipe's model
    seed) seeds the weights; the vocabulary is always fitted with the recipe's."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    with _locked(folder.parent / ".model.lock"):
        if not (folder / "config.json").is_file():
            _write_model(recipe, folder, recipe.model.seed if init_seed is None else init_seed)
    return folder


def _write_model(recipe: Recipe, folder: Path, init_seed: int) -> None:
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
        seed=init_seed,
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


def result_key(algo: str, rollout: str = "sync", max_lag: int = 1) -> str:
    """The name a run's results are stored under: the algorithm, with ``-async`` (and
    ``-lagK`` unless K is 1) for asynchronous rollouts, so both sit side by side."""
    if rollout == "sync":
        return algo
    return f"{algo}-async" if max_lag == 1 else f"{algo}-async-lag{max_lag}"


@dataclass(frozen=True)
class RunJob:
    """One training run of a recipe: an algorithm at one seed (plain data: it is sent to
    a worker process)."""

    recipe: Recipe
    algo: str
    key: str
    """The result key (:func:`result_key`)."""
    seed: int
    run_dir: Path
    model_dir: Path
    settings: dict[str, Any]
    """TrainConfig fields on top of the recipe's: overrides, rollout mode, the seeds."""
    log_path: Path | None = None
    command: str = ""
    """The learn command, kept in the run folder (``command.txt``) for ``--from-runs``."""

    @property
    def label(self) -> str:
        return f"{self.recipe.name} {self.key} seed {self.seed}"


def seed_settings(recipe: Recipe, seed: int) -> dict[str, Any]:
    """The TrainConfig seeds of run ``seed`` of ``recipe``: task sampling, env seeds, SFT
    data order (``seed``) and token sampling (``sampling_seed``) move with it; seed 0 is
    the recipe's own settings. (The model's initialisation moves too: :func:`run_job`.)"""
    return {
        "seed": int(recipe.train.get("seed", 0)) + seed,
        "sampling_seed": int(recipe.train.get("sampling_seed", 0)) + seed,
    }


def run_job(job: RunJob) -> tuple[str, int, dict[str, Any], float]:
    """Train one run (in this process, at one torch thread): ``(key, seed, summary, wall
    seconds)``; progress goes to stderr and ``job.log_path``."""
    import torch

    torch.set_num_threads(1)
    model = build_model(job.recipe, job.model_dir, init_seed=_model_record(job)["init_seed"])
    shutil.rmtree(job.run_dir, ignore_errors=True)  # a rerun must not append to old rows
    progress = Progress(job.label, job.log_path)
    progress.say("started")
    start = time.perf_counter()
    config = job.recipe.config(job.algo, str(model), job.run_dir, **job.settings)
    summary = train(config, on_event=progress)
    (job.run_dir / "command.txt").write_text(job.command + "\n")
    (job.run_dir / "model.json").write_text(json.dumps(_model_record(job)) + "\n")
    return job.key, job.seed, summary, time.perf_counter() - start


class Progress:
    """Progress lines of one run (``HH:MM:SS [recipe algo seed N] phase done/total ...
    elapsed``): each phase's start and end, and at most one line per ``every`` seconds
    in between, on stderr and appended to ``log_path``."""

    def __init__(self, label: str, log_path: Path | None = None, every: float = 30.0) -> None:
        self.label, self.log_path, self.every = label, log_path, every
        self.start = self.last = time.perf_counter()
        self.phase = ""
        self.wins = self.done = self.total = 0

    def __call__(self, event: ProgressEvent) -> None:
        now = time.perf_counter()
        if event.phase != self.phase:
            if self.phase == "sft" and self.done < self.total:  # a stop criterion ended it
                self.say(f"sft stopped by its stop criterion at step {self.done}/{self.total}")
            self.phase, self.wins = event.phase, 0
            self.last = 0.0  # a new phase's first event is always shown
        self.done, self.total = event.done, event.total
        self.wins += int(event.values.get("success", 0)) if event.phase.startswith("eval") else 0
        if now - self.last < self.every and event.done < event.total:
            return
        self.last = now
        if event.phase.startswith("eval"):
            detail = f"{event.done}/{event.total} episodes, success {self.wins / event.done:.3f}"
        else:
            shown = {k: v for k, v in event.values.items() if k in ("sft_loss", "success")}
            detail = f"step {event.done}/{event.total} " + " ".join(
                f"{k} {v:.3f}" for k, v in shown.items()
            )
        self.say(f"{event.phase} {detail}")

    def say(self, text: str) -> None:
        elapsed = _clock(time.perf_counter() - self.start)
        line = f"{time.strftime('%H:%M:%S')} [{self.label}] {text} (elapsed {elapsed})"
        print(line, file=sys.stderr, flush=True)
        if self.log_path is not None:
            with self.log_path.open("a") as f:
                f.write(line + "\n")


def _clock(seconds: float) -> str:
    """``12m05s``, or ``1h02m05s`` past an hour."""
    hours, rest = divmod(int(seconds), 3600)
    return (f"{hours}h" if hours else "") + f"{rest // 60:d}m{rest % 60:02d}s"


def run_recipe(
    recipe: Recipe,
    out: Path,
    work: Path,
    algos: Sequence[str] | None = None,
    command: str = "",
    from_runs: bool = False,
    rollout: str = "sync",
    max_lag: int = 1,
    seeds: Sequence[int] = (0,),
    jobs: int = 1,
    **overrides: Any,
) -> dict[str, Any]:
    """Run ``recipe`` for each algorithm and seed; write summary, metrics and curves to
    ``out`` (:func:`learn_recipes` with one recipe)."""
    plan = [(recipe, out, work)]
    return learn_recipes(
        plan, algos, command, from_runs, rollout, max_lag, seeds, jobs, **overrides
    )[0]


def plan_jobs(
    recipe: Recipe,
    work: Path,
    algos: Sequence[str] | None,
    seeds: Sequence[int],
    settings: dict[str, Any],
    log_path: Path | None = None,
    command: str = "",
) -> list[RunJob]:
    """The runs of ``recipe``: each algorithm (``"primary"``: the recipe's; None: all of
    them) at each seed, in ``work/<key>/seed<N>``, from ``work/model-seed<N>``.

    Raises:
        ConfigError: an algorithm the recipe does not have, or no held-out evaluation
            (``eval_episodes`` 0: learn measures held-out success).
    """
    chosen = tuple(
        dict.fromkeys(recipe.primary if a == "primary" else a for a in algos or recipe.algos)
    )
    unknown = [a for a in chosen if a not in recipe.algos]
    if unknown:
        raise ConfigError(f"recipe {recipe.name!r} has no algorithm {unknown}; use {recipe.algos}")
    jobs = []
    for algo in chosen:
        key = result_key(algo, settings.get("rollout", "sync"), settings.get("max_lag", 1))
        for seed in seeds:
            run_dir = work / key / f"seed{seed}"
            mine = {**settings, **seed_settings(recipe, seed)}
            if recipe.config(algo, "", run_dir, **mine).eval.episodes <= 0:
                raise ConfigError(
                    "learn measures held-out success: eval_episodes must be > 0 (train "
                    "without evaluating with `agentgym train --config <recipe file>`)"
                )
            model = work / f"model-seed{seed}"
            jobs.append(RunJob(recipe, algo, key, seed, run_dir, model, mine, log_path, command))
    return jobs


def learn_recipes(
    plan: Sequence[tuple[Recipe, Path, Path]],
    algos: Sequence[str] | None = None,
    command: str = "",
    from_runs: bool = False,
    rollout: str = "sync",
    max_lag: int = 1,
    seeds: Sequence[int] = (0,),
    jobs: int = 1,
    log_path: Path | None = None,
    train_seeds: Sequence[int] | None = None,
    **overrides: Any,
) -> list[dict[str, Any]]:
    """Run each ``(recipe, out, work)`` of ``plan`` for each algorithm and seed, ``jobs``
    runs at a time (worker processes when ``jobs`` > 1), and write each recipe's results
    to its ``out`` as soon as its runs end.

    Each seed trains from its own model initialisation with its own data order, env and
    sampling seeds (:func:`seed_settings`); the results hold every seed's and their
    distribution (:func:`combine`). With ``from_runs`` nothing is trained: the results
    are rebuilt from the finished run folders in each ``work`` (their ``summary.json`` and
    ``metrics.jsonl``); the wall time is then the run's own ``train_seconds``. With
    ``rollout="async"`` each algorithm trains with asynchronous rollouts and ``max_lag``;
    its results go under :func:`result_key` (``grpo-async``).

    ``train_seeds`` (a subset of ``seeds``) splits the runs between processes or
    machines: only those seeds train here; each other seed's run is read from its folder
    in ``work`` when it has finished there with the same settings, and a recipe's
    results are written once all of its runs are in. The reports returned are those of
    the recipes whose results were written.

    Raises:
        ConfigError: bad seeds, or a finished run folder made with other settings.
    """
    if rollout not in ("sync", "async"):
        raise ConfigError(f"rollout must be 'sync' or 'async', got {rollout!r}")
    if "rollout" in overrides or (rollout == "async" and "max_lag" in overrides):
        raise ConfigError(
            "set the rollout mode with --rollout/--max-lag, not --set: the results' name "
            "(grpo or grpo-async) follows from them"
        )
    if {"seed", "sampling_seed"} & set(overrides):
        raise ConfigError("set the seeds with --seeds, not --set seed=/sampling_seed=")
    if not seeds or len(set(seeds)) != len(seeds) or min(seeds) < 0:
        raise ConfigError(f"seeds must be distinct numbers >= 0, got {list(seeds)}")
    mode = {} if rollout == "sync" else {"rollout": "async", "max_lag": max_lag}
    pending = {
        recipe.name: plan_jobs(recipe, work, algos, seeds, {**overrides, **mode}, log_path, command)
        for recipe, _, work in plan
    }
    finished: dict[str, list[tuple[str, int, dict[str, Any], float]]] = {n: [] for n in pending}
    reports: dict[str, dict[str, Any]] = {}
    total = sum(len(v) for v in pending.values())
    clock = Progress("learn", log_path, every=0.0)

    def done(job: RunJob, result: tuple[str, int, dict[str, Any], float]) -> None:
        finished[job.recipe.name].append(result)
        summary = result[2]
        clock.say(
            f"{sum(len(v) for v in finished.values())}/{total} runs done: {job.label} "
            f"after SFT {summary['eval_before']['success']:.3f}, after RL "
            f"{summary['eval_after']['success']:.3f} in {_clock(result[3])}"
        )
        if len(finished[job.recipe.name]) == len(pending[job.recipe.name]):
            recipe, out, work = next(p for p in plan if p[0].name == job.recipe.name)
            reports[recipe.name] = write_results(
                recipe, out, work, finished[recipe.name], command, from_runs, mode, overrides
            )
            clock.say(verdict_lines(reports[recipe.name])[0].replace("**", ""))

    queue = [job for jobs_ in pending.values() for job in jobs_]
    if train_seeds is not None and (from_runs or not set(train_seeds) <= set(seeds)):
        raise ConfigError(
            f"train_seeds {list(train_seeds)} must be among seeds {list(seeds)}, without "
            "from_runs (which trains nothing)"
        )
    here = [j for j in queue if not from_runs and (train_seeds is None or j.seed in train_seeds)]

    def read_finished() -> None:
        """Take in the runs not trained here that have finished in their folders."""
        for job in queue:
            taken = {(key, seed) for key, seed, *_ in finished[job.recipe.name]}
            if job in here or (job.key, job.seed) in taken:
                continue
            summary = finished_run(job)
            if summary is None and from_runs:
                raise ConfigError(f"{job.run_dir} holds no finished run to rebuild from")
            if summary is not None:
                done(job, (job.key, job.seed, summary, float(summary["train_seconds"])))

    read_finished()
    run_jobs(here, jobs, done)
    read_finished()  # the runs that finished elsewhere while these trained
    for recipe, _, work in plan:
        if recipe.name not in reports:
            have = {s for _, s, *_ in finished[recipe.name]}
            missing = sorted({j.seed for j in pending[recipe.name]} - have)
            clock.say(
                f"{recipe.name}: results wait for seeds {missing}; once their runs are in "
                f"{work}, rebuild them with --from-runs"
            )
    return [reports[recipe.name] for recipe, _, _ in plan if recipe.name in reports]


def finished_run(job: RunJob) -> dict[str, Any] | None:
    """The summary of ``job``'s finished run in its folder (trained by another process or
    machine, or earlier), or None when there is none or it has not finished.

    Raises:
        ConfigError: the folder holds a run made with other settings or another model.
    """
    path = job.run_dir / "summary.json"
    if not path.is_file() or not (job.run_dir / "metrics.jsonl").is_file():
        return None
    summary: dict[str, Any] = json.loads(path.read_text())
    if summary.get("status") != "finished":  # still training, or killed
        return None
    config = job.recipe.config(job.algo, str(job.model_dir), job.run_dir, **job.settings)
    where = ("model", "run_dir")  # the folders it ran in (another machine's --work) differ
    mine = {k: v for k, v in json.loads(json.dumps(config.to_json())).items() if k not in where}
    same = {k: v for k, v in summary.get("config", {}).items() if k not in where} == mine
    model = job.run_dir / "model.json"  # runs made before it was kept have none
    if not same or (model.is_file() and json.loads(model.read_text()) != _model_record(job)):
        raise ConfigError(
            f"{job.run_dir} holds a run with other settings or another model than "
            f"{job.label}'s; delete it or use another --work"
        )
    return summary


def training_success(rows: Sequence[dict[str, Any]], window: int = 20) -> dict[str, Any] | None:
    """A run's mean training success over its first and last ``window`` RL steps (None
    without RL steps): set next to the held-out success, it shows whether RL learnt what
    carries to unseen tasks or fitted the training tasks."""
    rl = [float(r["success"]) for r in rows if r.get("phase") == "rl" and "success" in r]
    if not rl:
        return None
    n = min(window, len(rl))
    return {"first": round(sum(rl[:n]) / n, 4), "last": round(sum(rl[-n:]) / n, 4), "window": n}


def _model_record(job: RunJob) -> dict[str, Any]:
    """The model a run of ``job`` trains: the recipe's shape and this seed's init seed."""
    shape = dataclasses.asdict(job.recipe.model)
    return {"shape": shape, "init_seed": job.recipe.model.seed + job.seed}


def run_jobs(
    queue: Sequence[RunJob],
    jobs: int,
    done: Callable[[RunJob, tuple[str, int, dict[str, Any], float]], None],
) -> None:
    """Run ``queue`` in order, ``jobs`` at a time (in this process when ``jobs`` is 1,
    else in worker processes that stop with this one: :func:`.workers.run_all`),
    calling ``done`` with each run's result as it ends."""
    run_all(run_job, queue, jobs, done)


def write_results(
    recipe: Recipe,
    out: Path,
    work: Path,
    finished: Sequence[tuple[str, int, dict[str, Any], float]],
    command: str,
    from_runs: bool,
    mode: dict[str, Any],
    overrides: dict[str, Any],
) -> dict[str, Any]:
    """Write ``recipe``'s results (summary, metrics, curves, README) from its finished runs
    ``(key, seed, run summary, wall seconds)``, merged with the other algorithms already
    in ``out`` for the same recipe and config."""
    config = {**dataclasses.asdict(recipe), "overrides": overrides}
    by_key: dict[str, dict[str, dict[str, Any]]] = {}
    rows: list[dict[str, Any]] = []
    for key, seed, summary, wall in sorted(finished, key=lambda f: (f[0], f[1])):
        run_dir = work / key / f"seed{seed}"
        mine = read_metrics(run_dir / "metrics.jsonl")
        result = algo_result(summary, wall)
        if (fit := training_success(mine)) is not None:
            result["training_success"] = fit
        by_key.setdefault(key, {})[str(seed)] = result
        rows += [{"algo": key, "seed": seed, **row} for row in mine]
    results: dict[str, Any] = {}
    for key, per_seed in by_key.items():
        results[key] = combine(per_seed, recipe.bar)
        if mode:
            results[key]["rollout"] = mode
        # the commands that trained the runs (several where seeds were split between them)
        kept = [work / key / f"seed{seed}" / "command.txt" for seed in per_seed]
        trained = [p.read_text().strip() if p.is_file() else command for p in kept]
        results[key]["command"] = trained[0]
        if len(set(trained)) > 1:
            results[key]["commands"] = list(dict.fromkeys(trained))
    # algorithms run by other calls of the same recipe and config are kept (read when
    # this call ends), so the three can run in separate or concurrent calls
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
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
            "bar": recipe.bar,
            "verdict": results[primary]["verdict"],
            "distribution": results[primary]["distribution"],
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
    own = [c for r in results.values() for c in r.get("commands") or [r.get("command")] if c]
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m agentgym_trainers.learn", description=__doc__)
    parser.add_argument(
        "recipes",
        nargs="*",
        default=list(RECIPES),
        help=f"recipe names ({', '.join(RECIPES)}; default: all) or the paths of recipe files "
        "(copies of agentgym_trainers/configs/*.toml)",
    )
    parser.add_argument(
        "--algos",
        nargs="+",
        default=["primary"],
        help="algorithms, or 'primary' for each recipe's primary one (the default: the "
        "others triple the time)",
    )
    parser.add_argument(
        "--seeds",
        type=int,
        default=3,
        help="runs per algorithm, seeds 0..N-1 (default 3): each seeds the model's "
        "initialisation, the SFT data order, the env and the sampling seeds",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=_cores(),
        help=f"runs at a time, each a process at one thread (default: the cores, {_cores()})",
    )
    parser.add_argument(
        "--train-seeds",
        type=int,
        nargs="+",
        default=None,
        metavar="SEED",
        help="train only these of the seeds here (split the runs between processes or "
        "machines); the others are read from --work once finished there, and the results "
        "are written when every seed's run is in",
    )
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
    if args.seeds < 1 or args.jobs < 1:
        parser.error(f"--seeds and --jobs must be >= 1, got {args.seeds} and {args.jobs}")
    recipes = [find_recipe(name) for name in args.recipes]  # all checked first
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    log_path = work / "progress.log"
    print(f"learn: progress also in {log_path}", file=sys.stderr, flush=True)
    try:
        reports = learn_recipes(
            [(r, Path(args.out) / r.name, work / r.name) for r in recipes],
            args.algos,
            command=command,
            from_runs=args.from_runs,
            rollout=args.rollout,
            max_lag=args.max_lag,
            seeds=range(args.seeds),
            jobs=args.jobs,
            log_path=log_path,
            train_seeds=args.train_seeds,
            **overrides,
        )
    except Terminated as exc:  # the runs are stopped; finished ones stay in --work
        print(f"learn: {exc}; finished runs are kept in {work}", file=sys.stderr, flush=True)
        return 128 + signal.SIGTERM
    if len(reports) < len(recipes):
        return WAITING  # no verdict yet: not a failure of the bar
    return 0 if all(r["verdict"]["passes"] for r in reports) else 1


def _cores() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


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
