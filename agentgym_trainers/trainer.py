"""The reference trainer: rollouts -> advantages -> clipped policy-gradient updates.

One RL step:

1. sample ``tasks_per_step`` tasks from the curriculum; each is played ``group_size``
   times with one env seed (a GRPO/RLOO group);
2. roll out every episode with the current policy (version ``v``), keeping the sampled
   ids and their log-probabilities; with ``--branch``, then play branches from chosen
   turns' env snapshots (:mod:`agentgym_trainers.branching`);
3. compute advantages with the run's algorithm family (``agentgym_trainers/algorithms/``: GRPO,
   RLOO, REINFORCE with a running baseline, or PPO's GAE over agent tokens); env-error
   episodes and groups with fewer than 2 valid members are dropped here and never reach
   the loss;
4. ``epochs x minibatches`` optimizer steps; samples whose sampler weights are more than
   ``max_lag`` versions behind are dropped, and truncated importance sampling corrects
   the difference between the sampler and the trainer; then the policy version moves on
   by one (a version is one rollout batch's weights, not one optimizer step);
5. log metrics, record trajectories, checkpoint.

With ``--rollout async`` steps 1-2 run in a rollout worker while the learner trains
(:mod:`agentgym_trainers.async_rollout`): the learner takes the oldest finished groups,
masks the tokens sampled more than ``max_lag`` versions ago, and pushes its weights to
the worker after each update.
"""

from __future__ import annotations

import copy
import functools
import logging
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np
import torch

import agentgym_envs  # noqa: F401  (registers the envs)
from agentgym_envs.core.episode import EpisodeSummary, Truncation
from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.views import SPLIT_IDS, TASK_IDS, TASK_SET, env_view
from agentgym_envs.eval.metrics import episode_metrics
from agentgym_envs.llm.chat import ChatFormat
from agentgym_envs.llm.engine import StaticEngine
from agentgym_envs.llm.generation import Generator
from agentgym_envs.llm.models import load_model, resolve_device
from agentgym_envs.llm.sampler import Sampler
from agentgym_envs.rollout import LocalEnvSlots
from agentgym_envs.rollout.episodes import RolloutJob, RolloutRunner, Trajectory
from agentgym_envs.store import TrajectoryStore
from agentgym_trainers import distributed as dist
from agentgym_trainers.algorithms import (
    kl_k3,
    step_loss,
    truncated_is_weights,
)
from agentgym_trainers.algorithms.registry import make_algorithm
from agentgym_trainers.async_rollout import (
    AsyncRollouts,
    LocalPolicy,
    PolicyWeights,
    RolloutWorker,
    ThreadRolloutWorker,
    fresh_tokens,
    snapshot,
)
from agentgym_trainers.batch import TrainSeq, agent_forward, collate, micro_batches
from agentgym_trainers.branching import BranchStats, branch_metrics, make_brancher
from agentgym_trainers.config import VAL_SPLIT, TrainConfig
from agentgym_trainers.curriculum import CurriculumSampler
from agentgym_trainers.env_slots import make_trainer_env, pool_slots, trainer_env_kwargs
from agentgym_trainers.envs import register as register_fixtures
from agentgym_trainers.model import ValueHead
from agentgym_trainers.records import stored_episode
from agentgym_trainers.rollout_setup import rollout_engine, rollout_runner, rollout_sampler
from agentgym_trainers.runlog import RunLogger, parse_trackers

if TYPE_CHECKING:
    from agentgym_trainers.ray_rollout import ActorSpec, RayRolloutWorker

log = logging.getLogger(__name__)


def task_ids(env: gym.Env[Any, Any], split: str, difficulty: str | None) -> list[str]:
    """The ids of a split's tasks, from the first view ``env`` has
    (:mod:`agentgym_envs.core.views`): an AgentEnv's task set, a ``split_ids`` mapping, or
    its ``task_ids`` for every split."""
    if (tasks := env_view(env, TASK_SET)) is not None:
        return [t.id for t in tasks.task_set.pool(split, difficulty)]
    if (splits := env_view(env, SPLIT_IDS)) is not None:
        by_split = splits.split_ids
        if split not in by_split:
            raise ConfigError(
                f"{type(splits).__name__} has no split {split!r}; choose one of {sorted(by_split)}"
            )
        return list(by_split[split])
    if (listed := env_view(env, TASK_IDS)) is not None and listed.task_ids:
        return list(listed.task_ids)
    raise ValueError(
        f"{type(env.unwrapped).__name__} exposes no task ids (task_set, split_ids or task_ids)"
    )


STREAMS = {"rl": 0, "sft": 1, "eval": 2}


def env_seed(seed: int, step: int, group: int, stream: str = "rl") -> int:
    """An env seed per (run seed, stream, step, group): RL, SFT and evaluation episodes
    never share seeds."""
    entropy = [seed, STREAMS[stream], step, group]
    return int(np.random.SeedSequence(entropy).generate_state(1)[0] % (2**31 - 1))


class Trainer:
    """Trains ``config.policy.model`` on ``config.data.env``.

    Args:
        config: the run's configuration.
        make_env: override how envs are built (default ``gym.make(config.data.env, ...)``).
    """

    def __init__(
        self, config: TrainConfig, make_env: Callable[[], gym.Env[Any, Any]] | None = None
    ) -> None:
        self.cfg = config
        self.rank, self.world = dist.init()
        self.device = resolve_device(config.policy.device, dist.local_rank())
        register_fixtures()
        torch.manual_seed(config.data.seed)
        # fp32 master weights; forward passes run in bf16 on GPU (agentgym_trainers.precision)
        self.lm, self.tokenizer = load_model(
            config.policy.model, device=self.device, dtype=torch.float32, seed=config.data.seed
        )
        # the algorithm family turns rollouts into advantages (agentgym_trainers/algorithms/)
        self.algorithm = make_algorithm(config, self)
        self.value_head: ValueHead | None = None
        if self.algorithm.traits.needs_value_head:
            self.value_head = ValueHead(int(self.lm.config.hidden_size)).to(self.device)
        # the KL reference is taken when RL starts (after the SFT warm start): set_reference
        self.ref: torch.nn.Module | None = None
        self.params = [p for p in self.lm.parameters() if p.requires_grad]
        if self.value_head is not None:
            self.params += list(self.value_head.parameters())
        dist.broadcast_parameters(self.params)
        self.optimizer, self.scheduler = self.rl_optimizer()
        self.chat = ChatFormat(self.tokenizer)
        self.engine = rollout_engine(config, self.lm)
        self.sampler = self.make_sampler(self.lm, self.engine)
        if make_env is not None and config.data.train_pool:
            raise ConfigError(
                "--train-pool grows the tasks of the envs the trainer makes from --env; "
                "a custom make_env builds its own (pass it the tasks instead)"
            )
        # gym.make kwargs of --env, with the grown --train-pool tasks
        self.env_kwargs = trainer_env_kwargs(config.data)
        # the env factory a caller passed (None: built from --env); Ray pickles it into actors
        self.custom_make_env = make_env
        # picklable either way: the Ray rollout actor builds its envs with the same factory
        self.make_env = make_env or functools.partial(
            make_trainer_env, config.data.env, self.env_kwargs
        )
        self.runner = self.make_runner(self.sampler)
        # --rollout async: the rollout worker's side, made when RL starts (rl_step)
        self.rollouts: AsyncRollouts | None = None
        try:
            self.tasks = self.split_tasks(config.data.split)
            # --branch: branch rollouts from chosen turns (agentgym_trainers/branching.py)
            self.brancher = make_brancher(config, self.runner, self.make_env)
        except BaseException:  # a bad split: no env (or Ray pool) is left behind
            self.runner.close()
            raise
        self.curriculum = CurriculumSampler(
            self.tasks,
            alpha=config.data.curriculum_alpha,
            floor=config.data.curriculum_floor,
            seed=config.data.seed,
        )
        self.loss_config = config.objective  # step_loss reads the objective group itself
        self.version = 0
        self.step = 0
        self.run_dir = Path(config.run.run_dir)
        self.logger = RunLogger(
            self.run_dir,
            enabled=self.rank == 0,
            log_to=parse_trackers(config.run.log_to),
            config=config.to_json(),
        )
        self.shuffle = np.random.default_rng([config.data.seed, self.rank, 7])

    @property
    def version(self) -> int:
        """The policy version: how many rollout batches' updates the weights have had. It
        is the sampler's ``weights_version``, so every sample says which weights drew it."""
        return self.sampler.weights_version

    @version.setter
    def version(self, value: int) -> None:
        self.sampler.weights_version = value

    def rl_optimizer(self) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
        """A fresh AdamW for RL and its schedule (warmup, then constant/linear/cosine over
        every RL optimizer step). SFT has an optimizer of its own: its moments, sized to
        imitation gradients, would damp the much smaller RL gradients."""
        cfg = self.cfg
        groups: list[dict[str, Any]] = [
            {"params": [p for p in self.lm.parameters() if p.requires_grad]}
        ]
        if self.value_head is not None:  # the critic learns at its own (faster) rate
            groups.append(
                {
                    "params": list(self.value_head.parameters()),
                    "lr": cfg.optim.vf_lr or cfg.optim.lr * 10,
                }
            )
        optimizer = torch.optim.AdamW(groups, lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)
        total = max(cfg.run.steps * cfg.optim.epochs * cfg.optim.minibatches, 1)
        return optimizer, torch.optim.lr_scheduler.LambdaLR(
            optimizer, lambda k: lr_factor(k, cfg.optim.warmup_steps, total, cfg.optim.lr_schedule)
        )

    @property
    def pad_id(self) -> int:
        return self.chat.pad_id

    def decode(self, ids: Sequence[int]) -> str:
        return self.chat.decode(ids)

    def reference(self) -> torch.nn.Module:
        """The frozen KL reference, taken now if RL has not taken it yet."""
        if self.ref is None:
            self.set_reference()
        assert self.ref is not None, "a KL reference needs kl_coef > 0"
        return self.ref

    def set_reference(self) -> None:
        """Freeze a copy of the current policy as the KL reference (when ``kl_coef > 0``).
        ``train`` calls it when RL starts, so the reference is the SFT-warmed policy."""
        if self.cfg.objective.kl_coef > 0:
            self.ref = copy.deepcopy(self.lm).eval().requires_grad_(False)

    def make_sampler(self, lm: torch.nn.Module, engine: StaticEngine | None = None) -> Sampler:
        """The rollout sampler over ``lm`` (``engine``: default, a new one when the run
        uses the static engine; the asynchronous worker's copy of the policy gets its own).

        A copy's engine captures no CUDA graphs: it runs in the rollout worker's thread
        while the learner works on the same GPU, and a graph capture forbids the
        synchronising calls the learner makes in the meantime."""
        if engine is None and lm is not self.lm:
            engine = rollout_engine(self.cfg, lm, cuda_graphs=False)
        return rollout_sampler(self.cfg, lm, self.chat, self.rank, engine)

    def make_runner(self, generator: Generator) -> RolloutRunner:
        """A rollout runner with ``n_envs`` new envs around ``generator``: in this
        process, or (``--env-backend ray``) on a new Ray env pool, which the runner's
        ``close`` shuts down."""
        cfg = self.cfg.rollout
        slots = None
        if cfg.env_backend == "ray":
            slots = pool_slots(
                self.cfg.data.env,
                cfg.n_envs,
                env_kwargs=self.env_kwargs,
                make_env=self.custom_make_env,
                envs_per_actor=cfg.envs_per_actor,
                address=cfg.ray_address or None,
            )
        return rollout_runner(self.cfg, self.chat, self.make_env, generator, slots)

    # -- the asynchronous rollout worker (--rollout async) ---------------------------------

    def weights(self) -> PolicyWeights:
        """A copy of the policy's weights as its current version (what rollout workers
        load)."""
        return snapshot(self.lm, self.version)

    def async_rollouts(self, worker: RolloutWorker | None = None) -> AsyncRollouts:
        """The learner's side of asynchronous rollouts over ``worker`` (default:
        :meth:`rollout_worker`), started at this step; it reads the trainer only through
        :class:`~agentgym_trainers.async_rollout.Learner`."""
        r = self.cfg.rollout
        return AsyncRollouts(
            self,
            worker if worker is not None else self.rollout_worker(),
            first_step=self.step,
            tasks_per_step=r.tasks_per_step,
            world=self.world,
            max_lag=self.cfg.optim.max_lag,
            timeout_s=r.async_timeout_s,
        )

    def rollout_worker(self) -> RolloutWorker:
        """The rollout worker ``--rollout-worker`` names: :meth:`thread_worker` or
        :meth:`ray_worker`."""
        if self.cfg.rollout.rollout_worker == "ray":
            return self.ray_worker()
        return self.thread_worker()

    def thread_worker(self) -> ThreadRolloutWorker:
        """A worker thread with a copy of the policy: same sampling settings, engine kind
        and random stream as the synchronous sampler, and the current version."""
        lm = copy.deepcopy(self.lm).eval().requires_grad_(False)
        sampler = self.make_sampler(lm)
        sampler.set_state(self.sampler.get_state())
        sampler.weights_version = self.version
        return ThreadRolloutWorker(self.make_runner, LocalPolicy(sampler))

    def actor_spec(self) -> ActorSpec:
        """What a Ray rollout actor is built from: the config, (on CPU) the sampler's
        random stream, so the actor draws what the thread worker would, and the env
        factory (:attr:`make_env`, which carries the grown ``--train-pool`` tasks, so the
        actor plays the learner's task set and never regrows it: generating and
        validating a pool can take minutes)."""
        from agentgym_trainers.ray_rollout import ActorSpec  # ray only when asked for

        state = self.sampler.get_state() if self.sampler.device.type == "cpu" else None
        return ActorSpec(self.cfg, state, self.make_env, self.rank)

    def ray_worker(self) -> RayRolloutWorker:
        """A Ray rollout worker (:meth:`actor_spec`) with the current weights, on the
        cluster of ``--ray-address``."""
        from agentgym_trainers.ray_rollout import RayRolloutWorker

        address = self.cfg.rollout.ray_address or None
        return RayRolloutWorker(self.actor_spec(), self.weights(), address=address)

    def split_tasks(self, split: str) -> list[str]:
        """The task ids of ``split`` (at the configured difficulty), read from an env in
        this process: the runner's first env, or a probe env built and closed here when
        the envs live on a Ray pool.

        With ``val_tasks`` N, the last N shipped tasks of the training split are the
        ``val`` split and are left out of the training split (SFT and RL never see them);
        tasks grown by ``train_pool`` are training tasks only."""
        data = self.cfg.data
        ids = self._env_split(data.split if split == VAL_SPLIT else split)
        held = data.val_tasks
        if split == VAL_SPLIT and not held:
            raise ConfigError("the 'val' split is the tasks held out by --val-tasks N: set N")
        if held and split in (VAL_SPLIT, data.split):
            grown = self.env_kwargs.get("tasks")
            by = grown.header.get("grown") if grown is not None else None
            shipped = by["shipped"] if by and by["split"] == data.split else len(ids)
            if held >= shipped:
                raise ConfigError(
                    f"--val-tasks {held} holds out all {shipped} shipped tasks of split "
                    f"{data.split!r}: use fewer"
                )
            if split == VAL_SPLIT:
                return ids[shipped - held : shipped]
            return ids[: shipped - held] + ids[shipped:]
        return ids

    def _env_split(self, split: str) -> list[str]:
        difficulty = self.cfg.data.difficulty
        slots = self.runner.slots
        if isinstance(slots, LocalEnvSlots):
            return task_ids(slots.envs[0], split, difficulty)
        probe = self.make_env()
        try:
            return task_ids(probe, split, difficulty)
        finally:
            probe.close()

    # -- one RL step -----------------------------------------------------------------------

    def jobs(self, step: int | None = None) -> list[RolloutJob]:
        """This process's share of the groups of ``step`` (default: the current step; the
        same draw on every process)."""
        cfg = self.cfg
        step = self.step if step is None else step
        tasks = self.curriculum.sample(cfg.rollout.tasks_per_step * self.world)
        out = []
        for group in range(self.rank, len(tasks), self.world):
            seed = env_seed(cfg.data.seed, step, group)
            out += [RolloutJob(tasks[group], seed, group)] * cfg.rollout.group_size
        return out

    def rl_step(self) -> dict[str, float]:
        """Steps 1-5 of the module docstring; returns the step's metrics."""
        start = time.perf_counter()
        if self.cfg.objective.kl_coef > 0 and self.ref is None:
            self.set_reference()
        # 1-2. rollouts with the current policy (async: the oldest finished groups)
        asynchronous: dict[str, float] = {}
        generated_before: int | None
        branched: BranchStats | None = None
        if self.cfg.rollout.rollout == "async":
            self.lm.eval()
            if self.rollouts is None:
                self.rollouts = self.async_rollouts()
            trajs, rstats, asynchronous = self.rollouts.next_batch()
            generated_before = None  # the worker's sampler counts them: rstats
        else:
            jobs = self.jobs()
            self.lm.eval()
            generated_before = self.sampler.tokens_generated
            keep = self.brancher is not None  # env snapshots before every turn
            trajs, rstats = self.runner.collect(jobs, self.version, checkpoints=keep)
            if self.brancher is not None:  # 2b. branches from the chosen turns
                branched = self.brancher.branch(trajs, self.version, self.step)
                rstats.generation_s += branched.generation_s
                rstats.env_s += branched.env_s
        rollout_s = time.perf_counter() - start
        # 3. advantages (invalid episodes and dropped groups are not kept)
        seqs, adv_stats = self.advantages(trajs)
        # 4. updates
        train_start = time.perf_counter()
        upd = self.update(seqs)
        if upd.get("updates", 0.0) > 0:  # the sampler's next weights are a new version
            self.version += 1
        train_s = time.perf_counter() - train_start
        # 5. bookkeeping shared by every process
        mine = [(t.job.task_id, t.episode, len(t.segments)) for t in trajs]
        gathered = [g for part in dist.all_gather(mine) for g in part]
        for task, successes in _by_task(gathered).items():
            self.curriculum.update(task, successes)
        if self.rollouts is not None:  # weights out, then the next step's jobs
            self.rollouts.after_update(upd.get("updates", 0.0) > 0)
        self.record(trajs)
        self.step += 1
        generated = (
            rstats.generated_tokens
            if generated_before is None
            else self.sampler.tokens_generated - generated_before
        )
        metrics = _train_metrics(gathered)
        metrics.update(adv_stats)
        if branched is not None:
            metrics.update(branch_metrics(branched, seqs, self.device))
        metrics.update(upd)
        sums = dist.all_sum(
            [
                generated,
                rstats.generation_s,
                rstats.env_s,
                train_s,
                sum(t.retok_mismatches for t in trajs),
                upd.get("train_tokens", 0.0),
            ],
            self.device,
        )
        total = time.perf_counter() - start
        metrics.update(
            {
                "generated_tokens": sums[0],
                "gen_tokens_per_s": sums[0] / max(sums[1] / self.world, 1e-9),
                "train_tokens_per_s": sums[5] / max(sums[3] / self.world, 1e-9),
                "time_generation_s": sums[1] / self.world,
                "time_env_s": sums[2] / self.world,
                "time_train_s": sums[3] / self.world,
                "time_step_s": total,
                "frac_generation": sums[1] / self.world / total,
                "frac_env": sums[2] / self.world / total,
                "frac_train": sums[3] / self.world / total,
                "retok_mismatches": sums[4],
                "rollout_s": rollout_s,
                "policy_version": float(self.version),
            }
        )
        metrics.update(asynchronous)
        self.logger.log(self.step, metrics)
        return metrics

    def advantages(self, trajs: Sequence[Trajectory]) -> tuple[list[TrainSeq], dict[str, float]]:
        """Step 3: the kept sequences with their per-token advantages, from the algorithm."""
        return self.algorithm.advantages(trajs)

    @torch.no_grad()
    def evaluate(
        self, seqs: Sequence[TrainSeq], values: bool, model: torch.nn.Module | None = None
    ) -> list[list[float]]:
        """Per-token log-probabilities (or values) under the current weights (or under
        ``model``), aligned to tokens (0 where mask is 0)."""
        out: list[list[float]] = [[] for _ in seqs]
        for picked in micro_batches(seqs, self.cfg.optim.micro_batch_size):
            chunk = [seqs[i] for i in picked]
            batch = collate(chunk, self.chat.pad_id, self.device)
            lm = self.lm if model is None else model
            res = agent_forward(
                lm, self.value_head if model is None else None, batch, self.cfg.rollout.temperature
            )
            source = res.values if values else res.logprobs
            assert source is not None
            flat = source.float().cpu().tolist()
            masks = batch.mask.bool().tolist()  # one transfer, not a tensor read per token
            k = 0
            for row, (i, s) in enumerate(zip(picked, chunk, strict=True)):
                per = [0.0] * len(s.ids)
                for t in range(1, len(s.ids)):
                    if masks[row][t]:
                        per[t] = flat[k]
                        k += 1
                out[i] = per
        return out

    def update(self, seqs: list[TrainSeq]) -> dict[str, float]:
        """Step 4: ``epochs x minibatches`` optimizer steps over the kept sequences."""
        cfg = self.cfg
        self.lm.train()
        old = (
            self.evaluate(seqs, values=False)
            if cfg.optim.epochs * cfg.optim.minibatches > 1
            else None
        )
        totals: dict[str, float] = {}
        updates = 0
        stopped = False
        for _ in range(cfg.optim.epochs):
            if stopped:
                break
            order = self.shuffle.permutation(len(seqs)).tolist()
            for part in range(cfg.optim.minibatches):
                if stopped:
                    break
                picked = order[part :: cfg.optim.minibatches]
                chosen = [seqs[i] for i in picked]
                olds = None if old is None else [old[i] for i in picked]
                stats = self.optimizer_step(chosen, olds)
                stale = stats.pop("stale_dropped")
                totals["stale_dropped"] = totals.get("stale_dropped", 0.0) + stale
                if not stats.pop("updated"):  # no token to train on: not an update
                    continue
                updates += 1
                for key, value in stats.items():
                    totals[key] = totals.get(key, 0.0) + value
                # the statistics are summed over processes, so all of them stop together
                stopped = bool(cfg.optim.target_kl) and stats["approx_kl"] > cfg.optim.target_kl
        self.lm.eval()
        out = _mean_update_metrics(totals, updates)
        out["early_stopped"] = float(stopped)
        return out

    def optimizer_step(
        self, seqs: list[TrainSeq], old: list[list[float]] | None
    ) -> dict[str, float]:
        """One optimizer step; samples past ``max_lag`` are dropped first.

        The policy version does not change here: a version is the weights one rollout
        batch was sampled with, and ``rl_step`` moves it on once the batch's updates are
        done. The returned ``updated`` is 0.0 when no token was left to train on."""
        cfg = self.cfg
        versions = torch.tensor([s.version for s in seqs], dtype=torch.long)
        lag = float((self.version - versions).float().mean()) if seqs else 0.0
        # stale tokens are masked (a sequence with none fresh is dropped and counted)
        fresh, dropped = fresh_tokens(seqs, self.version, cfg.optim.max_lag)
        stale = float(dropped)
        pairs = [(s, None if old is None else old[i]) for i, s in fresh]
        self.optimizer.zero_grad(set_to_none=True)
        sums, total_tokens = self.accumulate(pairs)
        grad_norm = 0.0
        lr = float(self.optimizer.param_groups[0]["lr"])  # the rate this update uses
        if total_tokens > 0:
            if cfg.optim.max_grad_norm > 0:
                grad_norm = float(
                    torch.nn.utils.clip_grad_norm_(self.params, cfg.optim.max_grad_norm)
                )
            else:
                grad_norm = float(
                    torch.nn.utils.get_total_norm(
                        [p.grad for p in self.params if p.grad is not None]
                    )
                )
            self.optimizer.step()
            self.scheduler.step()
        keys = sorted(sums)
        reduced = dist.all_sum(
            [sums[k] for k in keys] + [stale, lag, float(len(seqs))], self.device
        )
        stats = dict(zip(keys, reduced[: len(keys)], strict=True))
        n = max(stats.get("tokens", 0.0), 1.0)
        return {
            "pg_loss": stats.get("pg_loss", 0.0) / n,
            "kl": stats.get("kl", 0.0) / n,
            "entropy": stats.get("entropy", 0.0) / n,
            "clip_frac": stats.get("clipped", 0.0) / n,
            "ratio": stats.get("ratio", 0.0) / n,
            "vf_loss": stats.get("vf_loss", 0.0) / n,
            "approx_kl": stats.get("approx_kl", 0.0) / n,
            "is_weight": stats.get("is_weight", 0.0) / n,
            "grad_norm": grad_norm,
            "stale_dropped": reduced[-3],
            "policy_lag": reduced[-2] / self.world,
            "train_tokens": stats.get("tokens", 0.0),
            "lr": lr,
            "updated": float(total_tokens > 0),
        }

    def accumulate(
        self, pairs: Sequence[tuple[TrainSeq, list[float] | None]]
    ) -> tuple[dict[str, float], float]:
        """Gradients of one optimizer step, accumulated over micro-batches and summed over
        processes; returns the loss statistics (sums) and the global agent-token count."""
        local_tokens = sum(s.agent_tokens for s, _ in pairs)
        total_tokens, total_seqs = dist.all_sum([local_tokens, len(pairs)], self.device)
        sums: dict[str, float] = {}
        if total_tokens > 0:
            for picked in micro_batches([s for s, _ in pairs], self.cfg.optim.micro_batch_size):
                chunk = [pairs[i] for i in picked]
                for key, value in self._micro_step(chunk, total_tokens, total_seqs).items():
                    sums[key] = sums.get(key, 0.0) + value
        dist.all_reduce_gradients(self.params)
        return sums, total_tokens

    def _micro_step(
        self,
        chunk: Sequence[tuple[TrainSeq, list[float] | None]],
        total_tokens: float,
        total_seqs: float,
    ) -> dict[str, float]:
        cfg = self.cfg
        seqs = [s for s, _ in chunk]
        seq_weights = _sequence_weights(
            seqs, cfg.objective.loss_agg, total_seqs, cfg.rollout.max_new_tokens
        )
        batch = collate(seqs, self.chat.pad_id, self.device)
        out = agent_forward(
            self.lm,
            self.value_head,
            batch,
            cfg.rollout.temperature,
            entropy_grad=cfg.objective.entropy_coef > 0,
            detach_values=cfg.objective.value_detach,
        )
        sel = batch.mask[:, 1:]

        def per_token(rows: Sequence[Sequence[float]]) -> torch.Tensor:
            full = torch.zeros(batch.ids.shape, dtype=torch.float32)
            for r, row in enumerate(rows):
                full[r, : len(row)] = torch.tensor(row, dtype=torch.float32)
            return full.to(self.device)[:, 1:][sel]

        mu = batch.sampler_logprobs[:, 1:][sel]
        adv = batch.advantages[:, 1:][sel]
        if chunk[0][1] is None:
            old = out.logprobs.detach()  # one update per batch: exactly on-policy
        else:
            old = per_token([o for _, o in chunk if o is not None])
        ref = None
        if self.ref is not None and not cfg.objective.kl_in_reward:
            with torch.no_grad():
                ref = agent_forward(self.ref, None, batch, cfg.rollout.temperature).logprobs
        weights = truncated_is_weights(old, mu, cfg.optim.tis_cap)
        values = returns = old_values = None
        if self.value_head is not None:
            values = out.values
            returns = per_token([s.returns for s in seqs])
            old_values = per_token([s.old_values for s in seqs])
        mask = torch.ones_like(out.logprobs)
        # the local sum is divided by the global token count; gradients are then summed
        # over processes, which gives the global token mean
        loss, stats = step_loss(
            logprobs=out.logprobs,
            old_logprobs=old,
            advantages=adv,
            mask=mask,
            n_tokens=total_tokens,
            config=self.loss_config,
            ref_logprobs=ref,
            entropy=out.entropy,
            values=values,
            old_values=old_values,
            returns=returns,
            is_weights=weights,
            token_weights=per_token(
                [[w] * len(s.ids) for s, w in zip(seqs, seq_weights, strict=True)]
            )
            if seq_weights is not None
            else None,
        )
        loss.backward()
        result = {k: float(v) for k, v in stats.items()}
        result["is_weight"] = float(weights.sum())
        if ref is not None and "kl" not in result:
            result["kl"] = float(kl_k3(out.logprobs.detach(), ref).sum())
        return result

    # -- records, checkpoints --------------------------------------------------------------

    def record(self, trajs: Sequence[Trajectory]) -> None:
        """Add every trajectory to ``trajectories.sqlite`` (one store per process), a
        :class:`~agentgym_envs.store.TrajectoryStore` that ``agentgym traj`` reads."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        name = "trajectories.sqlite" if self.rank == 0 else f"trajectories.rank{self.rank}.sqlite"
        now = time.time()
        eps = [stored_episode(t, self.cfg, self.step, str(self.run_dir), now) for t in trajs]
        with TrajectoryStore(self.run_dir / name) as store:
            store.add_many(eps)

    def stop_rollouts(self) -> None:
        """Stop the asynchronous rollout worker (RL is over; evaluation uses the
        synchronous runner)."""
        if self.rollouts is not None:
            self.rollouts.close()
            self.rollouts = None

    def close(self) -> None:
        try:
            self.stop_rollouts()
        finally:
            self.runner.close()
        self.logger.close()


# -- helpers ---------------------------------------------------------------------------------


def _sequence_weights(
    seqs: Sequence[TrainSeq], mode: str, total_seqs: float, budget: int
) -> list[float] | None:
    """Each sequence's per-token loss weight for ``loss_agg`` (None: the token mean)."""
    if mode == "token-mean":
        return None
    if mode == "seq-mean":  # every sequence counts the same, whatever its length
        return [1.0 / (max(s.agent_tokens, 1) * total_seqs) for s in seqs]
    return [1.0 / (total_seqs * budget) for _ in seqs]  # Dr. GRPO's constant normaliser


def _by_task(gathered: Sequence[tuple[str | None, EpisodeSummary, int]]) -> dict[str, list[bool]]:
    """Each curriculum task's valid episodes' successes (a job's task, not the env's)."""
    out: dict[str, list[bool]] = {}
    for task, ep, _ in gathered:
        if ep.valid and task is not None:
            out.setdefault(task, []).append(ep.success)
    return out


def _train_metrics(gathered: Sequence[tuple[str | None, EpisodeSummary, int]]) -> dict[str, float]:
    """The step's episode metrics under the trainer's log names: the shared
    :func:`~agentgym_envs.eval.metrics.episode_metrics`, plus segments per episode (token
    data only the trainer has)."""
    m = episode_metrics([ep for _, ep, _ in gathered])
    valid = max(m["valid"], 1)
    metrics = {
        "episodes": float(m["episodes"]),
        "reward": m["mean_return"],
        "success": m["success_rate"],
        "env_error_rate": m["env_error_rate"],
        "turns": m["mean_steps"],
        "context_truncated_rate": m["truncations"].get(Truncation.CONTEXT_LIMIT.value, 0) / valid,
        "segments_per_episode": sum(n for _, ep, n in gathered if ep.valid) / valid,
    }
    for name, mean in m["mean_reward_components"].items():
        metrics[f"reward/{name}"] = mean
    return metrics


def _mean_update_metrics(totals: dict[str, float], updates: int) -> dict[str, float]:
    """Means over the optimizer steps that updated (sums for the counts)."""
    summed = ("stale_dropped", "train_tokens")
    out = {k: v / max(updates, 1) for k, v in totals.items() if k not in summed}
    out["stale_dropped"] = totals.get("stale_dropped", 0.0)
    out["train_tokens"] = totals.get("train_tokens", 0.0)
    out["updates"] = float(updates)
    return out


def lr_factor(step: int, warmup: int, total: int, schedule: str) -> float:
    """Multiplier of the base learning rate at optimizer step ``step`` (0-based): linear
    warmup over ``warmup`` steps, then constant, linear decay or cosine decay to 0 at
    ``total``."""
    if step < warmup:
        return (step + 1) / warmup
    if schedule == "constant":
        return 1.0
    frac = min((step - warmup) / max(total - warmup, 1), 1.0)
    if schedule == "linear":
        return 1.0 - frac
    return 0.5 * (1.0 + math.cos(math.pi * frac))
