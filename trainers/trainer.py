"""The reference trainer: rollouts -> advantages -> clipped policy-gradient updates.

One RL step:

1. sample ``tasks_per_step`` tasks from the curriculum; each is played ``group_size``
   times with one env seed (a GRPO/RLOO group);
2. roll out every episode with the current policy (version ``v``), keeping the sampled
   ids and their log-probabilities;
3. compute advantages (GRPO, RLOO, REINFORCE with a running baseline, or PPO's GAE over
   agent tokens); env-error episodes and groups with fewer than 2 valid members are
   dropped here and never reach the loss;
4. ``epochs x minibatches`` optimizer steps; each increments the policy version, samples
   older than ``max_lag`` versions are dropped, and truncated importance sampling
   corrects the difference between the sampler and the trainer;
5. log metrics, record trajectories, checkpoint.
"""

from __future__ import annotations

import copy
import logging
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

import agentgym_envs  # noqa: F401  (registers the envs)
from agentgym_envs.core.errors import ConfigError
from agentgym_envs.eval.store import StoredEpisode, TrajectoryStore
from trainers import distributed as dist
from trainers.algorithms import (
    LossConfig,
    RunningBaseline,
    gae,
    grpo_advantages,
    kl_k3,
    lag_keep_mask,
    rloo_advantages,
    step_loss,
    truncated_is_weights,
    whiten,
    zero_variance_groups,
)
from trainers.batch import TrainSeq, agent_forward, collate, sequences
from trainers.chat import ChatFormat
from trainers.config import TrainConfig
from trainers.curriculum import CurriculumSampler
from trainers.engine import StaticEngine, supports
from trainers.envs import register as register_fixtures
from trainers.model import ValueHead, load_model
from trainers.rollout import Job, RolloutRunner, Trajectory
from trainers.runlog import RunLogger
from trainers.sampler import Sampler

log = logging.getLogger(__name__)


def task_ids(env: gym.Env[Any, Any], split: str, difficulty: str | None) -> list[str]:
    """The ids of a split's tasks (AgentEnv task sets, or an env's ``task_ids``)."""
    inner = env.unwrapped
    task_set = getattr(inner, "task_set", None)
    if task_set is not None:
        return [t.id for t in task_set.pool(split, difficulty)]
    ids = getattr(inner, "task_ids", None)
    if ids:
        return list(ids)
    raise ValueError(f"{type(inner).__name__} exposes no task ids (task_set or task_ids)")


def resolve_device(name: str, rank: int) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and torch.cuda.is_available():
        return torch.device("cuda", rank % torch.cuda.device_count())
    return torch.device(name)


STREAMS = {"rl": 0, "sft": 1, "eval": 2}


def env_seed(seed: int, step: int, group: int, stream: str = "rl") -> int:
    """An env seed per (run seed, stream, step, group): RL, SFT and evaluation episodes
    never share seeds."""
    entropy = [seed, STREAMS[stream], step, group]
    return int(np.random.SeedSequence(entropy).generate_state(1)[0] % (2**31 - 1))


class Trainer:
    """Trains ``config.model`` on ``config.env``.

    Args:
        config: the run's configuration.
        make_env: override how envs are built (default ``gym.make(config.env, ...)``).
    """

    def __init__(
        self, config: TrainConfig, make_env: Callable[[], gym.Env[Any, Any]] | None = None
    ) -> None:
        self.cfg = config
        self.rank, self.world = dist.init()
        self.device = resolve_device(config.device, self.rank)
        register_fixtures()
        torch.manual_seed(config.seed)
        # fp32 master weights; forward passes run in bf16 on GPU (trainers.precision)
        self.lm, self.tokenizer = load_model(
            config.model, device=self.device, dtype=torch.float32, seed=config.seed
        )
        self.value_head: ValueHead | None = None
        if config.algo == "ppo":
            self.value_head = ValueHead(int(self.lm.config.hidden_size)).to(self.device)
        self.ref = None
        if config.kl_coef > 0:
            self.ref = copy.deepcopy(self.lm).eval().requires_grad_(False)
        self.params = [p for p in self.lm.parameters() if p.requires_grad]
        if self.value_head is not None:
            self.params += list(self.value_head.parameters())
        dist.broadcast_parameters(self.params)
        self.optimizer = torch.optim.AdamW(
            self.params, lr=config.lr, weight_decay=config.weight_decay
        )
        self.chat = ChatFormat(self.tokenizer)
        self.engine = self._engine()
        self.sampler = Sampler(
            self.lm,
            eos_ids=[self.chat.eos_id],
            pad_id=self.chat.pad_id,
            temperature=config.temperature,
            top_p=config.top_p,
            seed=config.sampling_seed * 1000 + self.rank,
            engine=self.engine,
        )
        env_kwargs = dict(config.env_kwargs)
        self.make_env = make_env or (lambda: gym.make(config.env, **env_kwargs))
        self.runner = RolloutRunner(
            self.make_env,
            self.chat,
            self.sampler,
            n_envs=config.n_envs,
            max_new_tokens=config.max_new_tokens,
            max_context=config.max_context,
            context_policy=config.context_policy,
        )
        self.tasks = task_ids(self.runner.envs[0], config.split, config.difficulty)
        self.curriculum = CurriculumSampler(
            self.tasks,
            alpha=config.curriculum_alpha,
            floor=config.curriculum_floor,
            seed=config.seed,
        )
        self.baseline = RunningBaseline(config.baseline_decay)
        self.loss_config = LossConfig(
            clip_low=config.clip_low,
            clip_high=config.clip_high,
            dual_clip=config.dual_clip,
            kl_coef=config.kl_coef,
            entropy_coef=config.entropy_coef,
            vf_coef=config.vf_coef,
            vf_clip=config.vf_clip,
        )
        self.version = 0
        self.step = 0
        self.run_dir = Path(config.run_dir)
        self.logger = RunLogger(self.run_dir, enabled=self.rank == 0)
        self.shuffle = np.random.default_rng([config.seed, self.rank, 7])

    def _engine(self) -> StaticEngine | None:
        mode = self.cfg.generation
        if mode == "hf" or (mode == "auto" and not supports(self.lm)):
            return None
        if not supports(self.lm):
            raise ConfigError(
                f"--generation static supports Llama-family models, not "
                f"{type(self.lm).__name__}; use --generation hf (or auto)"
            )
        return StaticEngine(self.lm, max_batch=self.cfg.n_envs, max_len=self.cfg.max_context)

    # -- one RL step -----------------------------------------------------------------------

    def jobs(self) -> list[Job]:
        """This process's share of the step's groups (same draw on every process)."""
        cfg = self.cfg
        tasks = self.curriculum.sample(cfg.tasks_per_step * self.world)
        out = []
        for group in range(self.rank, len(tasks), self.world):
            seed = env_seed(cfg.seed, self.step, group)
            out += [Job(tasks[group], seed, group)] * cfg.group_size
        return out

    def rl_step(self) -> dict[str, float]:
        """Steps 1-5 of the module docstring; returns the step's metrics."""
        start = time.perf_counter()
        # 1-2. rollouts with the current policy
        jobs = self.jobs()
        self.lm.eval()
        generated_before = self.sampler.tokens_generated
        trajs, rstats = self.runner.collect(jobs, self.version)
        rollout_s = time.perf_counter() - start
        # 3. advantages (invalid episodes and dropped groups are not kept)
        seqs, adv_stats = self.advantages(trajs)
        # 4. updates
        train_start = time.perf_counter()
        upd = self.update(seqs)
        train_s = time.perf_counter() - train_start
        # 5. bookkeeping shared by every process
        gathered = [t for part in dist.all_gather([_summary(t) for t in trajs]) for t in part]
        for task, successes in _by_task(gathered).items():
            self.curriculum.update(task, successes)
        self.record(trajs)
        self.step += 1
        generated = self.sampler.tokens_generated - generated_before
        metrics = _episode_metrics(gathered)
        metrics.update(adv_stats)
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
        self.logger.log(self.step, metrics)
        return metrics

    def returns(self, traj: Trajectory) -> tuple[float, list[float]]:
        """Discounted return from the start, and the discount after each turn."""
        cfg = self.cfg
        discounts = [cfg.gamma * math.exp(-cfg.time_discount * dt) for dt in traj.durations_s]
        ret, scale = 0.0, 1.0
        for k, reward in enumerate(traj.rewards):
            ret += scale * reward
            scale *= discounts[k] if k < len(discounts) else cfg.gamma
        return ret, discounts

    def advantages(self, trajs: Sequence[Trajectory]) -> tuple[list[TrainSeq], dict[str, float]]:
        cfg = self.cfg
        rets, discounts = zip(*(self.returns(t) for t in trajs), strict=True) if trajs else ((), ())
        rewards = torch.tensor(rets, dtype=torch.float32)
        valid = torch.tensor([t.valid for t in trajs], dtype=torch.bool)
        groups = torch.tensor([t.job.group for t in trajs], dtype=torch.long)
        stats: dict[str, float] = {}
        seqs = sequences(trajs, cfg.gamma, discounts)
        if cfg.algo == "grpo":
            adv, kept = grpo_advantages(rewards, groups, valid, scale=cfg.adv_scale)
        elif cfg.algo == "rloo":
            adv, kept = rloo_advantages(rewards, groups, valid)
        elif cfg.algo == "reinforce":
            adv, kept = self.baseline.advantages(rewards, valid)
            all_r = [
                r
                for part in dist.all_gather(list(zip(rets, valid.tolist(), strict=True)))
                for r in part
            ]
            self.baseline.update(
                torch.tensor([r for r, _ in all_r]), torch.tensor([v for _, v in all_r])
            )
            stats["baseline"] = float(self.baseline.value or 0.0)
        else:  # ppo: token-level advantages from GAE over agent tokens
            adv, kept = torch.zeros_like(rewards), valid.clone()
        if cfg.algo in ("grpo", "rloo"):
            zero, n_groups = zero_variance_groups(rewards, groups, valid)
            z = dist.all_sum([zero, n_groups], self.device)
            stats["zero_variance_group_rate"] = z[0] / max(z[1], 1.0)
        seqs = [s for s in seqs if bool(kept[s.traj]) and s.agent_tokens > 0]
        for s in seqs:
            s.advantages = [float(adv[s.traj]) * m for m in s.mask]
        if cfg.algo == "ppo" and seqs:
            self._gae(seqs)
        if cfg.whiten and seqs:
            self._whiten(seqs)
        kept_n = dist.all_sum([float(kept.sum()), float(len(trajs))], self.device)
        stats["kept_episode_rate"] = kept_n[0] / max(kept_n[1], 1.0)
        return seqs, stats

    def _gae(self, seqs: list[TrainSeq]) -> None:
        """PPO: values from the current critic, then GAE per trajectory over the stream of
        its agent tokens (segments concatenated in order; observation tokens skipped)."""
        values = self._evaluate(seqs, values=True)
        streams: dict[int, list[tuple[int, int]]] = {}
        for i, s in enumerate(seqs):
            streams.setdefault(s.traj, []).extend((i, t) for t, m in enumerate(s.mask) if m)
        width = max(len(v) for v in streams.values())
        order = sorted(streams)
        r = torch.zeros(len(order), width)
        v = torch.zeros(len(order), width)
        g = torch.ones(len(order), width)
        m = torch.zeros(len(order), width)
        for row, traj in enumerate(order):
            for col, (i, t) in enumerate(streams[traj]):
                r[row, col] = seqs[i].rewards[t]
                v[row, col] = values[i][t]
                g[row, col] = seqs[i].gammas[t]
                m[row, col] = 1.0
        adv, ret = gae(r, v, m, gamma=g, lam=self.cfg.lam)
        for i, s in enumerate(seqs):
            s.returns = [0.0] * len(s.ids)
            s.old_values = values[i]
        for row, traj in enumerate(order):
            for col, (i, t) in enumerate(streams[traj]):
                seqs[i].advantages[t] = float(adv[row, col])
                seqs[i].returns[t] = float(ret[row, col])

    def _whiten(self, seqs: list[TrainSeq]) -> None:
        flat_adv = torch.tensor([a for s in seqs for a in s.advantages])
        flat_mask = torch.tensor([m for s in seqs for m in s.mask], dtype=torch.bool)
        white = whiten(flat_adv, flat_mask).tolist()
        k = 0
        for s in seqs:
            s.advantages = white[k : k + len(s.mask)]
            k += len(s.mask)

    @torch.no_grad()
    def _evaluate(self, seqs: Sequence[TrainSeq], values: bool) -> list[list[float]]:
        """Per-token log-probabilities (or values) under the current weights, aligned to
        tokens (0 where mask is 0)."""
        out: list[list[float]] = []
        for chunk in _chunks(list(seqs), self.cfg.micro_batch_size):
            batch = collate(chunk, self.chat.pad_id, self.device)
            res = agent_forward(self.lm, self.value_head, batch, self.cfg.temperature)
            source = res.values if values else res.logprobs
            assert source is not None
            flat = source.float().cpu().tolist()
            k = 0
            for row, s in enumerate(chunk):
                per = [0.0] * len(s.ids)
                for t in range(1, len(s.ids)):
                    if bool(batch.mask[row, t]):
                        per[t] = flat[k]
                        k += 1
                out.append(per)
        return out

    def update(self, seqs: list[TrainSeq]) -> dict[str, float]:
        """Step 4: ``epochs x minibatches`` optimizer steps over the kept sequences."""
        cfg = self.cfg
        self.lm.train()
        updates = cfg.epochs * cfg.minibatches
        old = self._evaluate(seqs, values=False) if updates > 1 else None
        totals: dict[str, float] = {}
        for _ in range(cfg.epochs):
            order = self.shuffle.permutation(len(seqs)).tolist()
            for part in range(cfg.minibatches):
                picked = order[part :: cfg.minibatches]
                chosen = [seqs[i] for i in picked]
                olds = None if old is None else [old[i] for i in picked]
                for key, value in self.optimizer_step(chosen, olds).items():
                    totals[key] = totals.get(key, 0.0) + value
        self.lm.eval()
        return _mean_update_metrics(totals, updates)

    def optimizer_step(
        self, seqs: list[TrainSeq], old: list[list[float]] | None
    ) -> dict[str, float]:
        """One optimizer step; samples past ``max_lag`` are dropped first."""
        cfg = self.cfg
        versions = torch.tensor([s.version for s in seqs], dtype=torch.long)
        keep = lag_keep_mask(versions, self.version, cfg.max_lag) if seqs else versions.bool()
        lag = float((self.version - versions).float().mean()) if seqs else 0.0
        stale = float((~keep).sum())
        pairs = [(s, None if old is None else old[i]) for i, s in enumerate(seqs) if keep[i]]
        self.optimizer.zero_grad(set_to_none=True)
        sums, total_tokens = self.accumulate(pairs)
        grad_norm = 0.0
        if total_tokens > 0:
            if cfg.max_grad_norm > 0:
                grad_norm = float(torch.nn.utils.clip_grad_norm_(self.params, cfg.max_grad_norm))
            else:
                grad_norm = float(
                    torch.nn.utils.get_total_norm(
                        [p.grad for p in self.params if p.grad is not None]
                    )
                )
            self.optimizer.step()
        self.version += 1
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
            "is_weight": stats.get("is_weight", 0.0) / n,
            "grad_norm": grad_norm,
            "stale_dropped": reduced[-3],
            "policy_lag": reduced[-2] / self.world,
            "train_tokens": stats.get("tokens", 0.0),
        }

    def accumulate(
        self, pairs: Sequence[tuple[TrainSeq, list[float] | None]]
    ) -> tuple[dict[str, float], float]:
        """Gradients of one optimizer step, accumulated over micro-batches and summed over
        processes; returns the loss statistics (sums) and the global agent-token count."""
        local_tokens = sum(s.agent_tokens for s, _ in pairs)
        total_tokens = dist.all_sum([local_tokens], self.device)[0]
        sums: dict[str, float] = {}
        if total_tokens > 0:
            for chunk in _chunks(list(pairs), self.cfg.micro_batch_size):
                for key, value in self._micro_step(chunk, total_tokens).items():
                    sums[key] = sums.get(key, 0.0) + value
        dist.all_reduce_gradients(self.params)
        return sums, total_tokens

    def _micro_step(
        self, chunk: Sequence[tuple[TrainSeq, list[float] | None]], total_tokens: float
    ) -> dict[str, float]:
        cfg = self.cfg
        seqs = [s for s, _ in chunk]
        batch = collate(seqs, self.chat.pad_id, self.device)
        out = agent_forward(
            self.lm, self.value_head, batch, cfg.temperature, entropy_grad=cfg.entropy_coef > 0
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
        if self.ref is not None:
            with torch.no_grad():
                ref = agent_forward(self.ref, None, batch, cfg.temperature).logprobs
        weights = truncated_is_weights(old, mu, cfg.tis_cap)
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
        :class:`~agentgym_envs.eval.store.TrajectoryStore` that ``agentgym traj`` reads."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        name = "trajectories.sqlite" if self.rank == 0 else f"trajectories.rank{self.rank}.sqlite"
        now = time.time()
        eps = [
            _stored_episode(t.record(), self.cfg, self.step, str(self.run_dir), now) for t in trajs
        ]
        with TrajectoryStore(self.run_dir / name) as store:
            store.add_many(eps)

    def close(self) -> None:
        self.runner.close()


# -- helpers ---------------------------------------------------------------------------------


def _stored_episode(
    rec: dict[str, Any], cfg: TrainConfig, step: int, run_id: str, now: float
) -> StoredEpisode:
    """A trajectory record as a stored episode: the chat as text (system prompt, then
    observation and action turns), dedup key (task, actions) since the rollout keeps no
    state hashes; the record's other fields (token counts, context policy ...) go to
    ``extra``. The end time is the time of recording (the end of the RL step)."""
    kept = {"task_id", "seeds", "policy_version", "versions", "rewards", "reward_components"}
    kept |= {"outcome", "valid", "actions", "system", "observations", "milestones", "cost"}
    kept |= {"started_at"}
    actions = [str(a) for a in rec["actions"]]
    messages: list[dict[str, Any]] = [{"role": "system", "content": rec["system"]}]
    observations = list(rec["observations"])
    for i, obs in enumerate(observations):
        if i > 0 and i - 1 < len(actions):
            messages.append({"role": "assistant", "content": actions[i - 1]})
        messages.append({"role": "user", "content": obs})
    return StoredEpisode(
        env_id=cfg.env,
        task_id=str(rec["task_id"] or ""),
        split=cfg.split,
        difficulty=cfg.difficulty or "",
        policy=f"hf:{cfg.model}",
        policy_version=str(rec["policy_version"]),
        versions={k: str(v) for k, v in rec["versions"].items()},
        seeds={k: int(v) for k, v in rec["seeds"].items() if v is not None},
        messages=messages
        if observations
        else [{"role": "assistant", "content": a} for a in actions],
        actions=actions,
        canonical_actions=actions,
        state_hashes=[],
        rewards=[float(r) for r in rec["rewards"]],
        reward_components={k: float(v) for k, v in rec["reward_components"].items()},
        outcome=str(rec["outcome"]),
        valid=bool(rec["valid"]),
        milestones=list(rec["milestones"]),
        cost=dict(rec["cost"]),
        started_at=float(rec["started_at"]) or now,
        ended_at=now,
        run_id=run_id,
        extra={"step": step, "algo": cfg.algo, **{k: v for k, v in rec.items() if k not in kept}},
    )


def _chunks(items: list[Any], size: int) -> list[list[Any]]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def _summary(t: Trajectory) -> dict[str, Any]:
    return {
        "task": t.job.task_id,
        "return": t.ret,
        "success": t.success,
        "valid": t.valid,
        "turns": len(t.actions),
        "components": t.reward_components,
        "truncated": bool(t.context.get("truncated")),
        "segments": len(t.segments),
    }


def _by_task(summaries: Sequence[dict[str, Any]]) -> dict[str, list[bool]]:
    out: dict[str, list[bool]] = {}
    for s in summaries:
        if s["valid"] and s["task"] is not None:
            out.setdefault(s["task"], []).append(bool(s["success"]))
    return out


def _episode_metrics(summaries: Sequence[dict[str, Any]]) -> dict[str, float]:
    valid = [s for s in summaries if s["valid"]]
    n = max(len(valid), 1)
    metrics = {
        "episodes": float(len(summaries)),
        "reward": sum(s["return"] for s in valid) / n,
        "success": sum(s["success"] for s in valid) / n,
        "env_error_rate": 1.0 - len(valid) / max(len(summaries), 1),
        "turns": sum(s["turns"] for s in valid) / n,
        "context_truncated_rate": sum(s["truncated"] for s in valid) / n,
        "segments_per_episode": sum(s["segments"] for s in valid) / n,
    }
    names = sorted({k for s in valid for k in s["components"]})
    for name in names:
        metrics[f"reward/{name}"] = sum(s["components"].get(name, 0.0) for s in valid) / n
    return metrics


def _mean_update_metrics(totals: dict[str, float], updates: int) -> dict[str, float]:
    out = {k: v / updates for k, v in totals.items() if k not in ("stale_dropped", "train_tokens")}
    out["stale_dropped"] = totals.get("stale_dropped", 0.0)
    out["train_tokens"] = totals.get("train_tokens", 0.0)
    return out
