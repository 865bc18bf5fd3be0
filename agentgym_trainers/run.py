"""A whole training run: SFT warm start, evaluation before, RL steps, evaluation after,
checkpoints and resume. ``agentgym train`` calls :func:`train`."""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.eval.metrics import episode_metrics
from agentgym_envs.llm.sampler import Sampler
from agentgym_envs.rollout import oracle_script
from agentgym_envs.rollout.episodes import RolloutJob, Trajectory
from agentgym_trainers import distributed as dist
from agentgym_trainers.algorithms.sft import SFT
from agentgym_trainers.batch import TrainSeq, agent_forward, collate, micro_batches
from agentgym_trainers.config import TrainConfig
from agentgym_trainers.provenance import platform_info
from agentgym_trainers.runlog import read_metrics
from agentgym_trainers.trainer import Trainer, env_seed

log = logging.getLogger(__name__)

CHECKPOINTS = "checkpoints"
SUMMARY_FILE = "summary.json"
CURVES_EVERY_S = 60.0
"""During RL, ``curves.png`` and ``summary.json`` are rewritten after a step when this
many seconds have passed since the last time (and at the end)."""


@dataclass(frozen=True)
class ProgressEvent:
    """An episode or a step that a run finished, for progress output (``train(on_event=)``).

    Attributes:
        phase: an evaluation (``eval_initial``, ``eval_before``, ``eval_after``; a greedy
            twin ends in ``_greedy``): one episode ended; ``sft`` or ``rl``: one step.
        done: the episodes or steps of the phase done so far (this process's share).
        total: the episodes or steps the phase will do (this process's share).
        seconds: the wall time of this episode or step.
        values: a step's metrics; an episode's ``task_id``, ``outcome``, ``success`` and
            ``reward``.
    """

    phase: str
    done: int
    total: int
    seconds: float
    values: Mapping[str, Any] = field(default_factory=dict)


OnEvent = Callable[[ProgressEvent], None]


# -- SFT warm start -------------------------------------------------------------------------


def oracle_trajectories(trainer: Trainer, episodes: int) -> list[Trajectory]:
    """Episodes of the train split played by each env's scripted oracle, tokenized with the
    same chat format and masks as RL rollouts."""
    cfg = trainer.cfg
    share = range(trainer.rank, episodes, trainer.world)
    tasks = trainer.tasks
    jobs = [
        RolloutJob(tasks[i % len(tasks)], env_seed(cfg.data.seed, 0, i, "sft"), i) for i in share
    ]

    # the oracle runs next to its env: in this process, or in a Ray pool's actor
    trajs, _ = trainer.runner.collect(jobs, trainer.version, script=oracle_script)
    return [t for t in trajs if t.episode.valid]


def sft(
    trainer: Trainer,
    steps: int,
    episodes: int,
    lr: float,
    stop_loss: float = 0.0,
    stop_window: int = 25,
    on_event: OnEvent | None = None,
    *,
    stop_success: float = 0.0,
    check_every: int = 50,
    check_episodes: int = 64,
) -> list[dict[str, float]]:
    """Imitate oracle trajectories: token-mean NLL on agent tokens only (the imitation
    targets of :class:`~agentgym_trainers.algorithms.sft.SFT`); at most ``steps`` steps,
    fewer when ``stop_loss`` > 0 and the mean loss of the last ``stop_window`` steps falls
    to it (the loss is summed over processes, so every rank stops at the same step), or
    when ``stop_success`` > 0 and, checked every ``check_every`` steps, the policy's
    sampled success on ``check_episodes`` train-split episodes reaches it (the rate is
    gathered over processes). A check's step has ``sft_check_success`` in its entry."""
    cfg = trainer.cfg
    trajs = oracle_trajectories(trainer, episodes)
    seqs, _ = SFT(cfg, trainer).advantages(trajs)
    success = dist.all_sum([sum(t.episode.success for t in trajs), len(trajs)], trainer.device)
    log.info(
        "SFT on %d oracle episodes (oracle success %.2f)",
        success[1],
        success[0] / max(success[1], 1),
    )
    # SFT's own optimizer: RL gets a fresh one (Trainer.rl_optimizer), untouched by these
    # moments and step counts
    optimizer = torch.optim.AdamW(trainer.params, lr=lr, weight_decay=cfg.optim.weight_decay)
    rng = random.Random(cfg.data.seed)
    history = []
    trainer.lm.train()
    batch_size = max(cfg.optim.micro_batch_size * 2, 8)
    for step in range(steps):
        t0 = time.perf_counter()
        chosen = rng.sample(seqs, min(batch_size, len(seqs))) if seqs else []
        history.append(sft_step(trainer, optimizer, chosen))
        trainer.logger.log(step, {"sft_loss": history[-1]["sft_loss"]}, phase="sft")
        if on_event is not None:
            on_event(ProgressEvent("sft", step + 1, steps, time.perf_counter() - t0, history[-1]))
        if stop_success > 0 and (step + 1) % check_every == 0 and step + 1 < steps:
            check = evaluate(trainer, cfg.data.split, check_episodes, cfg.eval.temperature)
            trainer.lm.train()
            history[-1]["sft_check_success"] = check["success"]
            trainer.logger.log(step, {"sft_check_success": check["success"]}, phase="sft")
            if check["success"] >= stop_success:
                log.info(
                    "SFT stopped after %d of %d steps: train-split success %.3f >= %g",
                    step + 1, steps, check["success"], stop_success,
                )  # fmt: skip
                break
        if stop_loss > 0 and len(history) >= stop_window:
            mean = sum(h["sft_loss"] for h in history[-stop_window:]) / stop_window
            if mean <= stop_loss:
                log.info(
                    "SFT stopped after %d of %d steps: mean loss of the last %d steps %.4f <= %g",
                    step + 1,
                    steps,
                    stop_window,
                    mean,
                    stop_loss,
                )
                break
    trainer.lm.eval()
    trainer.optimizer, trainer.scheduler = trainer.rl_optimizer()
    return history


def sft_step(
    trainer: Trainer, optimizer: torch.optim.Optimizer, seqs: list[TrainSeq]
) -> dict[str, float]:
    total = dist.all_sum([sum(s.agent_tokens for s in seqs)], trainer.device)[0]
    optimizer.zero_grad(set_to_none=True)
    loss_sum = 0.0
    for picked in micro_batches(seqs, trainer.cfg.optim.micro_batch_size):
        batch = collate([seqs[i] for i in picked], trainer.chat.pad_id, trainer.device)
        out = agent_forward(trainer.lm, None, batch, 1.0)
        loss = -out.logprobs.sum() / total
        loss.backward()
        loss_sum += float(loss.detach()) * total
    dist.all_reduce_gradients(trainer.params)
    if total > 0:
        torch.nn.utils.clip_grad_norm_(trainer.params, trainer.cfg.optim.max_grad_norm or 1e9)
        optimizer.step()
    return {"sft_loss": dist.all_sum([loss_sum], trainer.device)[0] / max(total, 1.0)}


# -- evaluation -----------------------------------------------------------------------------


def evaluate(
    trainer: Trainer,
    split: str,
    episodes: int,
    temperature: float,
    on_episode: Callable[[Trajectory], None] | None = None,
) -> dict[str, Any]:
    """Success and return on the first ``episodes`` tasks of ``split`` (fixed env seeds),
    with the evaluation's wall time; ``on_episode`` gets each trajectory as it ends."""
    start = time.perf_counter()
    cfg = trainer.cfg
    pool = trainer.split_tasks(split)
    share = range(trainer.rank, episodes, trainer.world)
    jobs = [
        RolloutJob(pool[i % len(pool)], env_seed(cfg.data.seed, 0, i, "eval"), i) for i in share
    ]
    main = trainer.runner.sampler
    evaluator = Sampler(
        trainer.lm,
        eos_ids=[trainer.chat.eos_id],
        pad_id=trainer.chat.pad_id,
        temperature=temperature,
        top_p=1.0,
        seed=cfg.rollout.sampling_seed + 99,
        engine=trainer.engine,
    )
    evaluator.weights_version = trainer.version
    trainer.runner.sampler = evaluator
    trainer.lm.eval()
    try:
        trajs, _ = trainer.runner.collect(jobs, trainer.version, on_episode=on_episode)
    finally:
        trainer.runner.sampler = main
    metrics = episode_metrics(
        [e for part in dist.all_gather([t.episode for t in trajs]) for e in part]
    )
    # each valid episode's success by task: tasks repeat when episodes outnumber the
    # split's tasks, so intervals must count tasks, not episodes
    per_task: dict[str, list[int]] = {}
    outcomes = [(t.job.task_id, t.episode.success) for t in trajs if t.episode.valid]
    for part in dist.all_gather(outcomes):
        for task, success in part:
            per_task.setdefault(str(task), []).append(int(success))
    result = {
        "split": split,
        "episodes": metrics["episodes"],
        "valid_episodes": metrics["valid"],
        "success": metrics["success_rate"],
        "reward": metrics["mean_return"],
        "temperature": temperature,
        "policy_version": trainer.version,
        "wall_s": time.perf_counter() - start,
        "tasks": len(per_task),
        "per_task": per_task,
    }
    log.info(
        "evaluation on %s: success %.3f over %d episodes (policy version %d)",
        split,
        result["success"],
        result["valid_episodes"],
        trainer.version,
    )
    return result


def _evaluate_phase(
    trainer: Trainer, summary: dict[str, Any], key: str, on_event: OnEvent | None = None
) -> None:
    """``summary[key]``: the evaluation at the configured temperature; with
    ``--eval-greedy-too`` and a temperature above 0, ``summary[key + "_greedy"]`` too.
    Each result is also a metrics row (phase ``eval``) and rewrites ``summary.json``."""
    cfg = trainer.cfg.eval
    runs = [(key, cfg.temperature)]
    if cfg.greedy_too and cfg.temperature > 0:
        runs.append((f"{key}_greedy", 0.0))
    for name, temperature in runs:
        total = len(range(trainer.rank, cfg.episodes, trainer.world))
        watch = _episode_events(name, total, on_event)
        result = summary[name] = evaluate(trainer, cfg.split, cfg.episodes, temperature, watch)
        row = {"success": result["success"], "reward": result["reward"]}
        row |= {"episodes": result["episodes"], "wall_s": result["wall_s"]}
        trainer.logger.log(trainer.step, {f"{name}_{k}": v for k, v in row.items()}, "eval")
        write_summary(trainer, summary)


def _episode_events(
    phase: str, total: int, on_event: OnEvent | None
) -> Callable[[Trajectory], None] | None:
    """A trajectory callback that reports each evaluation episode as a ProgressEvent."""
    if on_event is None:
        return None
    done = 0

    def on_episode(t: Trajectory) -> None:
        nonlocal done
        done += 1
        ep = t.episode
        values: dict[str, Any] = {"task_id": t.job.task_id, "outcome": ep.outcome.value}
        values |= {"success": ep.success, "reward": ep.reward}
        on_event(ProgressEvent(phase, done, total, ep.wall_ms / 1000.0, values))

    return on_episode


def write_summary(trainer: Trainer, summary: Mapping[str, Any], status: str = "running") -> None:
    """``summary.json`` as it stands (rank 0), with ``status`` (``running`` or
    ``finished``) and the steps done; written whole, then renamed into place."""
    if trainer.rank != 0:
        return
    trainer.run_dir.mkdir(parents=True, exist_ok=True)
    path = trainer.run_dir / SUMMARY_FILE
    tmp = path.with_name(f".{SUMMARY_FILE}.tmp")
    data = {**summary, "status": status}
    data.setdefault("steps", trainer.step)
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)


# -- checkpoints ----------------------------------------------------------------------------


def save_checkpoint(trainer: Trainer) -> Path:
    """``run_dir/checkpoints/step_NNNNNN``: weights (loadable as a model spec), optimizer,
    curriculum, the algorithm's state (REINFORCE's baseline) and every RNG, so a resumed
    run continues the same stream."""
    folder = trainer.run_dir / CHECKPOINTS / f"step_{trainer.step:06d}"
    if trainer.rank == 0:
        tmp = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        trainer.lm.save_pretrained(str(tmp))
        trainer.tokenizer.save_pretrained(str(tmp))
        state = {
            "step": trainer.step,
            "version": trainer.version,
            "optimizer": trainer.optimizer.state_dict(),
            "scheduler": trainer.scheduler.state_dict(),
            # the KL reference is the policy when RL started (after SFT), not the weights
            # a resumed run loads: it must travel with the checkpoint
            "reference": None if trainer.ref is None else trainer.ref.state_dict(),
            "value_head": None if trainer.value_head is None else trainer.value_head.state_dict(),
            "curriculum": trainer.curriculum.state_dict(),
            # the algorithm's state; the key keeps its old name, so earlier checkpoints load
            "baseline": trainer.algorithm.state_dict(),
            "config": trainer.cfg.to_json(),
        }
        torch.save(state, tmp / "trainer_state.pt")
        shutil.rmtree(folder, ignore_errors=True)
        tmp.rename(folder)
        prune_checkpoints(trainer.run_dir, trainer.cfg.run.keep_checkpoints)
    dist.all_gather(None)  # barrier: the folder exists before anyone reads it
    rng = {
        "sampler": trainer.sampler.get_state(),
        "torch": torch.get_rng_state(),
        "shuffle": trainer.shuffle.bit_generator.state,
        "numpy": np.random.get_state(),
    }
    torch.save(rng, folder / f"rng_rank{trainer.rank}.pt")
    return folder


def prune_checkpoints(run_dir: Path, keep: int) -> list[Path]:
    """Delete all but the newest ``keep`` checkpoints (0 keeps all); returns the deleted."""
    found = sorted((run_dir / CHECKPOINTS).glob("step_[0-9]*[0-9]"))
    doomed = found[:-keep] if keep > 0 else []
    for folder in doomed:
        shutil.rmtree(folder, ignore_errors=True)
    return doomed


def latest_checkpoint(run_dir: Path) -> Path | None:
    found = sorted((run_dir / CHECKPOINTS).glob("step_[0-9]*[0-9]"))
    return found[-1] if found else None


def load_checkpoint(trainer: Trainer, folder: Path) -> None:
    from transformers import AutoModelForCausalLM

    loaded = AutoModelForCausalLM.from_pretrained(
        str(folder), dtype=next(trainer.lm.parameters()).dtype
    )
    trainer.lm.load_state_dict(loaded.state_dict())
    state = torch.load(folder / "trainer_state.pt", weights_only=False)
    trainer.optimizer.load_state_dict(state["optimizer"])
    trainer.scheduler.load_state_dict(state["scheduler"])
    if trainer.cfg.objective.kl_coef > 0:
        if state.get("reference") is None:
            raise ConfigError(
                f"{folder} holds no KL reference (it was saved with kl_coef 0 or by an older "
                "version): resume with --kl-coef 0, or start a new run"
            )
        trainer.set_reference()
        assert trainer.ref is not None
        trainer.ref.load_state_dict(state["reference"])
    if trainer.value_head is not None and state["value_head"] is not None:
        trainer.value_head.load_state_dict(state["value_head"])
    trainer.curriculum.load_state_dict(state["curriculum"])
    trainer.algorithm.load_state_dict(state["baseline"])
    trainer.step, trainer.version = int(state["step"]), int(state["version"])
    rng_file = folder / f"rng_rank{trainer.rank}.pt"
    if rng_file.exists():
        rng = torch.load(rng_file, weights_only=False)
        trainer.sampler.set_state(rng["sampler"])
        torch.set_rng_state(rng["torch"])
        trainer.shuffle.bit_generator.state = rng["shuffle"]
        np.random.set_state(rng["numpy"])


def check_replicas(trainer: Trainer) -> list[float]:
    """Every process must hold the same weights after training; a silent divergence of
    data-parallel replicas would make the saved checkpoint (rank 0's) unrepresentative."""
    with torch.no_grad():
        checksum = float(sum(p.double().sum() + p.double().abs().sum() for p in trainer.params))
    sums = [float(x) for x in dist.all_gather(checksum)]
    if any(abs(x - sums[0]) > 1e-6 * max(1.0, abs(sums[0])) for x in sums):
        raise RuntimeError(f"data-parallel replicas diverged: parameter checksums {sums}")
    return sums


CURVES = (
    "reward", "success", "sft_loss", "kl", "entropy", "clip_frac", "grad_norm",
    "zero_variance_group_rate", "env_error_rate", "policy_lag", "stale_dropped",
    "gen_tokens_per_s", "frac_generation", "frac_env", "frac_train", "retok_mismatches",
    "context_truncated_rate", "vf_loss", "lag_max", "stale_token_frac", "time_learner_wait_s",
    "time_worker_wait_s",
)  # fmt: skip


def plot_curves(trainer: Trainer) -> Path | None:
    """``curves.png``: the headline metrics and every reward component."""
    path = trainer.logger.path
    if not path.exists():
        return None
    logged = {k for row in read_metrics(path) for k in row}
    keys = [k for k in CURVES if k in logged] + sorted(k for k in logged if k.startswith("reward/"))
    return trainer.logger.plot(keys)


# -- the run --------------------------------------------------------------------------------


def train(
    config: TrainConfig,
    make_env: Callable[[], Any] | None = None,
    progress: Callable[[int, dict[str, float]], None] | None = None,
    on_event: OnEvent | None = None,
) -> dict[str, Any]:
    """Run ``config`` end to end; returns a summary (also written to ``summary.json``).

    The run folder grows as it goes: ``metrics.jsonl`` gets a row per SFT and RL step
    and per evaluation, ``summary.json`` (``status`` ``running``) is rewritten after each
    phase, and during RL both it and ``curves.png`` are redrawn every
    :data:`CURVES_EVERY_S` seconds; at the end they are final (``status`` ``finished``).

    Args:
        config: the run.
        make_env: builds one env (default: ``gym.make`` of ``config.data.env``).
        progress: called after each RL step with the step and its metrics.
        on_event: called with each evaluation episode, SFT step and RL step as it ends
            (progress output: :class:`ProgressEvent`).
    """
    trainer = Trainer(config, make_env)
    summary: dict[str, Any] = {
        "config": config.to_json(),
        "world_size": trainer.world,
        "platform": platform_info(str(trainer.device)),  # an exact replay needs the same
    }
    try:
        resumed = latest_checkpoint(trainer.run_dir) if config.run.resume else None
        if resumed is not None:
            load_checkpoint(trainer, resumed)
            summary["resumed_from"] = str(resumed)
        start = time.perf_counter()
        if config.eval.episodes and resumed is None and config.sft.steps > 0:
            _evaluate_phase(trainer, summary, "eval_initial", on_event)
        if resumed is None and config.sft.steps > 0:
            _sft_phase(trainer, summary, on_event)
        if resumed is None:
            trainer.set_reference()  # KL anchors RL to the SFT-warmed policy
        if config.eval.episodes and resumed is None:
            _evaluate_phase(trainer, summary, "eval_before", on_event)
        if trainer.algorithm.traits.rl:
            _rl_phase(trainer, summary, progress, on_event)
        if config.eval.episodes:
            _evaluate_phase(trainer, summary, "eval_after", on_event)
        summary["replica_checksums"] = check_replicas(trainer)
        summary["train_seconds"] = time.perf_counter() - start
        summary["steps"] = trainer.step
        summary["checkpoint"] = str(save_checkpoint(trainer))
        summary["status"] = "finished"
        write_summary(trainer, summary, "finished")
        if trainer.rank == 0:
            summary["curves"] = str(plot_curves(trainer) or "")
    finally:
        trainer.close()
    return summary


def _sft_phase(trainer: Trainer, summary: dict[str, Any], on_event: OnEvent | None) -> None:
    cfg = trainer.cfg.sft
    sft_start = time.perf_counter()
    history = sft(
        trainer, cfg.steps, cfg.episodes, cfg.lr, cfg.stop_loss, cfg.stop_window, on_event,
        stop_success=cfg.stop_success, check_every=cfg.check_every,
        check_episodes=cfg.check_episodes,
    )  # fmt: skip
    summary["sft_seconds"] = time.perf_counter() - sft_start
    summary["sft_loss"] = [h["sft_loss"] for h in history]
    summary["sft_steps_done"] = len(history)
    checks = [
        [i + 1, h["sft_check_success"]] for i, h in enumerate(history) if "sft_check_success" in h
    ]
    if checks:
        summary["sft_checks"] = checks  # [steps done, train-split success]
    write_summary(trainer, summary)


def _rl_phase(
    trainer: Trainer,
    summary: dict[str, Any],
    progress: Callable[[int, dict[str, float]], None] | None,
    on_event: OnEvent | None,
) -> None:
    """RL steps up to ``--steps`` or the time budget, with checkpoints, and the curves
    and summary redrawn every :data:`CURVES_EVERY_S` seconds."""
    config = trainer.cfg
    rl_start = drawn = time.perf_counter()
    while trainer.step < config.run.steps:
        over = bool(config.run.time_budget_s) and (
            time.perf_counter() - rl_start > config.run.time_budget_s
        )
        if dist.all_sum([float(over)], trainer.device)[0] > 0:  # every process stops
            summary["stopped_by_time_budget"] = True
            break
        t0 = time.perf_counter()
        metrics = trainer.rl_step()
        seconds = time.perf_counter() - t0
        if config.run.checkpoint_every and trainer.step % config.run.checkpoint_every == 0:
            save_checkpoint(trainer)
        if time.perf_counter() - drawn >= CURVES_EVERY_S and trainer.rank == 0:
            plot_curves(trainer)
            write_summary(trainer, {**summary, "steps": trainer.step})
            drawn = time.perf_counter()
        if progress is not None:
            progress(trainer.step, metrics)
        if on_event is not None:
            on_event(ProgressEvent("rl", trainer.step, config.run.steps, seconds, metrics))
    trainer.stop_rollouts()  # an asynchronous worker stops before evaluation
    summary["rl_seconds"] = time.perf_counter() - rl_start


__all__ = [
    "ProgressEvent",
    "evaluate",
    "load_checkpoint",
    "save_checkpoint",
    "sft",
    "train",
    "write_summary",
]
