"""The trainer's configuration: a few frozen groups of settings, and the command line
generated from them.

Each field's docstring (the string literal under it) is its ``--help`` text: the CLI is
read from this file, so the two cannot drift apart. The command line stays flat: every
field of every group is one ``--flag``, named after its *flat name* (the group's
``PREFIX`` plus the field's name, e.g. ``SFTConfig.steps`` is ``--sft-steps``).
:meth:`TrainConfig.from_flat` builds a config from flat names and
:meth:`TrainConfig.to_json` writes them back, so ``summary.json`` and checkpoints hold
one flat dictionary.

Each group checks its own fields when it is built (its ``__post_init__``);
:class:`TrainConfig` checks only what spans groups, reading the algorithm's traits from
:data:`ALGO_TRAITS`. The command line (:func:`from_args`) also checks the env
(:mod:`agentgym_trainers.env_spec`).
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import difflib
import inspect
import itertools
import json
import math
import textwrap
import typing
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Literal

from agentgym_envs.core.errors import ConfigError
from agentgym_trainers.env_spec import EnvSpec

VAL_SPLIT = "val"
"""The split of the training tasks held out by ``val_tasks`` (recipe selection)."""


@dataclass(frozen=True)
class AlgoTraits:
    """What the configuration must know of an algorithm before torch loads, and where its
    class is. Declared once, in :data:`ALGO_TRAITS`: the checks below read it, the
    registry imports ``impl``, and each
    :class:`~agentgym_trainers.algorithms.base.Algorithm` class reads its own entry."""

    impl: str
    """``module:Class`` of the :class:`~agentgym_trainers.algorithms.base.Algorithm`,
    imported by the registry (never by the torch-free config)."""
    needs_group: bool = False
    """Compares the rollouts of a group, so ``group_size`` must be at least 2."""
    needs_value_head: bool = False
    """Trains a critic: the trainer adds a value head and its parameters."""
    rl: bool = True
    """Runs RL steps (False: the run is only the SFT warm start)."""
    branch_credit: bool = False
    """Takes branch rollouts' per-turn credit (``--branch``)."""


_ALGORITHMS = "agentgym_trainers.algorithms"
ALGO_TRAITS: dict[str, AlgoTraits] = {
    "grpo": AlgoTraits(f"{_ALGORITHMS}.group:GRPO", needs_group=True, branch_credit=True),
    "rloo": AlgoTraits(f"{_ALGORITHMS}.group:RLOO", needs_group=True, branch_credit=True),
    "reinforce": AlgoTraits(f"{_ALGORITHMS}.reinforce:Reinforce", branch_credit=True),
    "ppo": AlgoTraits(f"{_ALGORITHMS}.ppo:PPO", needs_value_head=True),
    "sft": AlgoTraits(f"{_ALGORITHMS}.sft:SFT", rl=False),
}
"""Every ``algo`` name (the command line's choices, in this order), its traits and its
class. A new algorithm is its module plus one entry here."""
ALGOS: tuple[str, ...] = tuple(ALGO_TRAITS)


def _at_least(owner: object, low: int, *names: str) -> None:
    """Raise ConfigError for the first of ``names`` (fields of ``owner``) below ``low``."""
    for name in names:
        value = getattr(owner, name)
        if value < low:
            raise ConfigError(f"{name} must be >= {low}, got {value}")


@dataclass(frozen=True)
class DataConfig:
    """The env and its tasks: what is trained on, and how tasks are drawn."""

    env: str = "agentgym/FrozenLake-v0"
    """Env id to train on (any registered agentgym/ or agentgym-train/ id)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for gym.make, as JSON (e.g. '{"difficulty": "easy"}')."""
    split: str = "train"
    """Task split that training samples from."""
    difficulty: str | None = None
    """Only train on tasks of this difficulty (default: all)."""
    curriculum_alpha: float = 1.0
    """Task weights [p(1-p)]^alpha from running success p (0: uniform)."""
    curriculum_floor: float = 0.05
    """Smallest relative task weight, so no task is ever excluded."""
    seed: int = 0
    """Seed of task sampling and env seeds."""
    val_tasks: int = 0
    """Hold out the last N tasks of the training split from SFT and RL; they form the
    'val' split (--eval-split val), on which a recipe is chosen before 'test' is read."""
    train_pool: int = 0
    """Grow the training split to N tasks with the env's own task generator (validated
    like the shipped tasks, none sharing an initial state with any shipped task, so no
    held-out task leaks in); needs --difficulty (0: the shipped tasks only)."""

    def __post_init__(self) -> None:
        _at_least(self, 0, "val_tasks", "train_pool")

    def env_spec(self) -> EnvSpec:
        """``env`` and ``env_kwargs`` typed and checked (see :class:`EnvSpec`)."""
        return EnvSpec.parse(self.env, self.env_kwargs)


@dataclass(frozen=True)
class PolicyConfig:
    """The model that is trained, and where it runs."""

    model: str = "smollm2"
    """'smollm2' (default policy), 'tiny' (random test model), an HF folder or a .gguf file."""
    device: str = "auto"
    """'auto' (cuda if available), 'cpu' or 'cuda[:n]'."""


@dataclass(frozen=True)
class RolloutConfig:
    """How episodes are played and sampled: groups, batch, context and sampling."""

    tasks_per_step: int = 4
    """Distinct (task, env seed) groups per step and per process."""
    group_size: int = 4
    """Rollouts per group (G); GRPO/RLOO need at least 2."""
    n_envs: int = 16
    """Env instances played in parallel (one generation batch)."""
    max_new_tokens: int = 48
    """Sampled tokens per turn at most."""
    max_context: int = 2048
    """Tokens per sequence at most."""
    context_policy: Literal["truncate", "drop", "summary"] = "summary"
    """When history outgrows max_context: end the episode, drop the oldest turns, or drop
    them and add a structured summary. System prompt and task are always kept."""
    system_prompt: bool = True
    """Start each sequence with the env's system prompt. A model trained from scratch
    learns nothing from a prefix that is the same in every episode; leaving it out
    (--system-prompt false) shortens every sequence, which the CPU recipes rely on (the
    chat template may still write its own default system turn)."""
    generation: Literal["auto", "static", "hf"] = "auto"
    """Rollout generation: 'static' KV-cache engine (CUDA graphs on GPU; Llama-family
    models), 'hf' (transformers forward, any model), 'auto' (static when supported)."""
    temperature: float = 1.0
    """Sampling temperature."""
    top_p: float = 1.0
    """Nucleus sampling mass."""
    sampling_seed: int = 0
    """Seed of the policy's token sampling (separate from env seeds)."""
    rollout: Literal["sync", "async"] = "sync"
    """'sync': each step plays its episodes, then trains on them. 'async': a rollout
    worker plays with the previous weights while the learner trains, each step takes the
    oldest tasks_per_step finished groups, and tokens sampled more than max_lag versions
    behind are masked (see agentgym_trainers/async_rollout.py)."""
    async_timeout_s: float = 600.0
    """With --rollout async: raise if the rollout worker delivers no batch for this long
    (a hung env or generation server), rather than wait forever."""
    rollout_worker: Literal["thread", "ray"] = "thread"
    """With --rollout async: where the rollout worker plays. 'thread': a background
    thread of the learner's process with a copy of the policy on its device. 'ray': a Ray
    actor (1 CPU, on the cluster of --ray-address; needs the dist extra) with a CPU copy
    of --model; the learner pushes its weights there after each update. Neither updates
    an external generation server (see docs/distributed.md)."""
    env_backend: Literal["local", "ray"] = "local"
    """Where the n_envs env slots live: 'local' (in this process) or 'ray' (on the actors
    of a Ray env pool, agentgym_envs.distributed; needs the dist extra). Same episodes for
    the same seeds; an actor that dies or hangs ends its episodes as env_error (masked)
    and is restarted. With --rollout async the rollout worker has a pool of its own."""
    ray_address: str = ""
    """With --env-backend ray or --rollout-worker ray: the Ray cluster to join
    (host:port; default: $RAY_ADDRESS, else a new local Ray)."""
    envs_per_actor: int = 1
    """With --env-backend ray: envs hosted by one actor (each on a thread there)."""

    def __post_init__(self) -> None:
        _at_least(self, 1, "tasks_per_step", "group_size", "n_envs")
        _at_least(self, 1, "max_new_tokens", "max_context")
        if self.max_new_tokens >= self.max_context:
            raise ConfigError("max_new_tokens must be smaller than max_context")
        _at_least(self, 1, "envs_per_actor")
        if not self.async_timeout_s > 0:
            raise ConfigError(f"async_timeout_s must be > 0 seconds, got {self.async_timeout_s}")
        if self.rollout_worker != "thread" and self.rollout != "async":
            raise ConfigError(
                f"--rollout-worker {self.rollout_worker} places the asynchronous rollout "
                "worker: add --rollout async, or drop --rollout-worker (synchronous rollouts "
                "play in the learner's process)"
            )


@dataclass(frozen=True)
class OptimConfig:
    """The optimizer and how each rollout batch is turned into updates."""

    lr: float = 1e-5
    """RL AdamW learning rate (RL starts with a fresh optimizer after the SFT warm start)."""
    lr_schedule: Literal["constant", "linear", "cosine"] = "constant"
    """RL learning-rate schedule after warmup, over all RL optimizer steps."""
    warmup_steps: int = 0
    """RL optimizer steps of linear warmup from 0 to lr."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    max_grad_norm: float = 1.0
    """Gradient clipping norm (0 disables)."""
    vf_lr: float = 0.0
    """Learning rate of the value head (ppo; 0: lr x 10, a critic that starts at zero
    must catch up with the returns before its baseline helps)."""
    epochs: int = 1
    """Passes over each rollout batch."""
    minibatches: int = 1
    """Optimizer steps per pass; later ones are off-policy by one version each."""
    micro_batch_size: int = 4
    """Sequences per forward/backward (does not change the gradient)."""
    target_kl: float = 0.0
    """Stop a batch's remaining epochs/minibatches once the approximate KL between the
    updated and the sampling policy exceeds this (0: never)."""
    max_lag: int = 1
    """Drop samples whose sampler weights are more than this many policy versions behind
    the learner's (a version is one rollout batch's updates; epochs and minibatches over
    one batch are never stale). Per token: with --rollout async the stale turns of an
    episode are masked and its fresher turns train."""
    tis_cap: float = 2.0
    """Truncated importance sampling cap C in min(pi_old/mu, C)."""

    def __post_init__(self) -> None:
        _at_least(self, 1, "epochs", "minibatches", "micro_batch_size")
        if self.target_kl < 0 or self.vf_lr < 0:
            raise ConfigError("target_kl and vf_lr must be >= 0")
        _at_least(self, 0, "warmup_steps")
        if self.max_lag < 0 or self.tis_cap < 1.0:
            raise ConfigError("max_lag must be >= 0 and tis_cap >= 1")


@dataclass(frozen=True)
class AdvantageConfig:
    """How returns become advantages: discounts, baselines, GAE, whitening, branch
    rollouts and tool credit."""

    adv_scale: Literal["std", "none"] = "std"
    """GRPO: divide by the group's reward std, or only subtract the mean."""
    whiten: bool = False
    """Whiten advantages over the batch's agent tokens."""
    gamma: float = 1.0
    """Discount per turn (returns and GAE)."""
    lam: float = 0.95
    """GAE lambda (ppo)."""
    time_discount: float = 0.0
    """Time-aware discount rate per second of env time: gamma_t = gamma*exp(-rate*dt)."""
    baseline_decay: float = 0.9
    """REINFORCE running-baseline decay."""
    branch: Literal["none", "every", "entropy", "first_error", "tool", "write"] = "none"
    """Branch rollouts (per-turn credit, grpo/rloo/reinforce with --rollout sync): at up
    to branch_max_turns chosen turns of each episode, restore the env snapshot and the
    context there, sample branch_k - 1 more actions, play each to the end, and give each
    of the branch_k actions (the original's too) its return from that turn minus their
    mean. Where: 'every' (any turn, drawn at random), 'entropy' (the turns whose sampled
    tokens were least likely), 'first_error' (the action of the first policy error or
    safety gate, else where milestone progress stalled in a failed episode), 'tool'
    (turns with a tool call), 'write' (turns calling a WRITE tool). Costs env steps and
    tokens: metrics branch_* (see agentgym_trainers/branching.py)."""
    branch_k: int = 4
    """With --branch: actions compared per branch point, the original's included."""
    branch_max_turns: int = 1
    """With --branch: branch points per episode at most."""
    tool_credit: float = 0.0
    """Layered credit for tool steps (0: off): on a turn whose step's parser error blames
    one part of the action (info["error"]: an unknown tool's name, an invalid argument
    value, an argument that should not be there, a call's missing or malformed arguments,
    or the whole action for a parse error), subtract this from the final advantage of
    that part's tokens only (after baselines, branches, KL and whitening); every other
    token, a correctly chosen tool name included, keeps its advantage. Never adds credit.
    Metrics tool_credit_turns, tool_credit_tokens, tool_credit_unplaced (see
    agentgym_trainers/tool_credit.py)."""

    def __post_init__(self) -> None:
        if not 0.0 <= self.gamma <= 1.0 or not 0.0 <= self.lam <= 1.0:
            raise ConfigError("gamma and lam must be in [0, 1]")
        if self.time_discount < 0:
            raise ConfigError("time_discount must be >= 0 (a rate per second)")
        if not 0.0 <= self.baseline_decay < 1.0:
            raise ConfigError(f"baseline_decay must be in [0, 1), got {self.baseline_decay}")
        if self.branch != "none" and (self.branch_k < 2 or self.branch_max_turns < 1):
            raise ConfigError(
                f"--branch needs --branch-k >= 2 (the original action and at least one "
                f"branch) and --branch-max-turns >= 1, got {self.branch_k} and "
                f"{self.branch_max_turns}"
            )
        if not (math.isfinite(self.tool_credit) and self.tool_credit >= 0):
            raise ConfigError(
                "tool_credit must be a finite number >= 0 (the advantage taken from the "
                f"tokens of a wrong part of a turn; 0 turns it off), got {self.tool_credit}"
            )


KLEstimator = Literal["k1", "k2", "k3"]
"""The per-token KL estimators (agentgym_trainers.algorithms.losses.kl_estimate)."""


@dataclass(frozen=True)
class LossConfig:
    """The terms of the loss: ratio clipping, KL, entropy and the value loss."""

    clip_low: float = 0.2
    """Ratio clip below: 1 - clip_low."""
    clip_high: float = 0.28
    """Ratio clip above: 1 + clip_high."""
    dual_clip: float | None = None
    """Dual-clip constant c > 1 for negative advantages (off by default)."""
    kl_coef: float = 0.0
    """Coefficient of the KL to the reference: the policy when RL starts, after the SFT
    warm start (0: no reference model)."""
    kl_estimator: KLEstimator = "k3"
    """Per-token KL estimator: k1 = logp - ref, k2 = (logp - ref)^2/2, k3 = e^d - d - 1."""
    kl_in_reward: bool = False
    """Charge the KL as a per-token reward penalty (computed once on the rollout's tokens,
    before advantages) instead of as a loss term."""
    loss_agg: Literal["token-mean", "seq-mean", "constant"] = "token-mean"
    """How token losses are averaged: over all agent tokens of the step, per sequence then
    over sequences, or divided by the constant sequences x max_new_tokens (Dr. GRPO)."""
    entropy_coef: float = 0.0
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient (ppo)."""
    value_detach: bool = False
    """Train the value head on detached trunk features, so the critic's loss never moves
    the policy's weights (ppo)."""
    vf_clip: float | None = 0.2
    """Value clipping range (ppo)."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"LossConfig.{f.name} must be a finite number, got {value}")
        if not 0.0 <= self.clip_low < 1.0:
            raise ConfigError(f"LossConfig.clip_low must be in [0, 1), got {self.clip_low}")
        if self.clip_high < 0.0:
            raise ConfigError(f"LossConfig.clip_high must be >= 0, got {self.clip_high}")
        if self.dual_clip is not None and self.dual_clip <= 1.0:
            raise ConfigError(
                f"LossConfig.dual_clip must be None or > 1, got {self.dual_clip}; "
                "typical values are 3 to 10"
            )
        for name in ("kl_coef", "entropy_coef", "vf_coef"):
            if getattr(self, name) < 0.0:
                raise ConfigError(f"LossConfig.{name} must be >= 0, got {getattr(self, name)}")
        if self.vf_clip is not None and self.vf_clip <= 0.0:
            raise ConfigError(
                f"LossConfig.vf_clip must be None (no clipping) or > 0, got {self.vf_clip}"
            )
        if self.kl_estimator not in typing.get_args(KLEstimator):
            raise ConfigError(
                f"LossConfig.kl_estimator must be one of {typing.get_args(KLEstimator)}, "
                f"got {self.kl_estimator!r}"
            )
        if self.kl_in_reward and self.kl_coef <= 0:
            raise ConfigError("kl_in_reward needs --kl-coef > 0 (the penalty's weight)")


@dataclass(frozen=True)
class SFTConfig:
    """The SFT warm start: oracle imitation before RL."""

    PREFIX: ClassVar[str] = "sft_"
    """Each field's flag is ``--sft-<field>``."""

    steps: int = 0
    """Oracle-imitation optimizer steps before RL (the SFT warm start)."""
    episodes: int = 64
    """Oracle episodes of the train split collected for SFT."""
    lr: float = 1e-4
    """SFT learning rate."""
    stop_loss: float = 0.0
    """Stop SFT before ``steps`` once the mean SFT loss (nats per agent token) of the last
    ``stop_window`` steps is at most this (0: run all ``steps``). An early stop tied to the
    loss, not a step count, lands at the same point of learning whatever the data order."""
    stop_window: int = 25
    """SFT steps whose mean loss ``stop_loss`` reads."""
    stop_success: float = 0.0
    """Stop SFT before ``steps`` once the policy's success on the first
    ``check_episodes`` tasks of the train split, sampled at the evaluation temperature
    with fixed env seeds, reaches this (0: never checked). Checked every
    ``check_every`` steps. What the warm start is for (a policy that reads the
    observations), measured directly, so RL starts from the same competence whatever
    the seed and the machine's rounding."""
    check_every: int = 50
    """SFT steps between two checks of ``stop_success``."""
    check_episodes: int = 64
    """Train-split episodes one ``stop_success`` check plays."""

    def __post_init__(self) -> None:
        if not (math.isfinite(self.stop_loss) and self.stop_loss >= 0):
            raise ConfigError(
                f"sft_stop_loss must be a finite number >= 0 (0: no early stop), got "
                f"{self.stop_loss}"
            )
        if self.stop_window < 1:
            raise ConfigError(f"sft_stop_window must be >= 1, got {self.stop_window}")
        if not (math.isfinite(self.stop_success) and 0 <= self.stop_success <= 1):
            raise ConfigError(
                "sft_stop_success must be a success rate in [0, 1] (0: no check), got "
                f"{self.stop_success}"
            )
        if self.check_every < 1 or self.check_episodes < 1:
            raise ConfigError(
                "sft_check_every and sft_check_episodes must be >= 1, got "
                f"{self.check_every} and {self.check_episodes}"
            )


@dataclass(frozen=True)
class HeldOutEvalConfig:
    """The held-out evaluation before and after training."""

    PREFIX: ClassVar[str] = "eval_"
    """Each field's flag is ``--eval-<field>``."""

    split: str = "test"
    """Held-out split for the before/after evaluation."""
    episodes: int = 0
    """Episodes of eval_split to evaluate before and after training (0: skip)."""
    temperature: float = 0.0
    """Sampling temperature of the evaluation (0: greedy)."""
    greedy_too: bool = False
    """Also evaluate greedily when the temperature is above 0 (summary keys
    eval_*_greedy), so a sampled-policy result always comes with its greedy one."""


@dataclass(frozen=True)
class RunConfig:
    """How long the run lasts and what it writes: steps, output folder, checkpoints."""

    steps: int = 20
    """RL steps (each: one rollout batch, then its optimizer updates)."""
    time_budget_s: float = 0.0
    """Stop RL after this many seconds of training (0: no limit; steps still applies)."""
    run_dir: str = "runs/latest"
    """Output folder: metrics.jsonl, trajectories.sqlite, curves.png, checkpoints/."""
    checkpoint_every: int = 0
    """Save a checkpoint every N steps (0: only at the end)."""
    keep_checkpoints: int = 3
    """Keep the newest K checkpoints and delete older ones (0: keep all)."""
    resume: bool = False
    """Continue from the newest checkpoint in run_dir."""
    log_to: str = ""
    """Also log every step's metrics to these trackers, comma-separated: 'tensorboard'
    (event files in run_dir/tensorboard; extra tensorboard) and 'wandb' (Weights & Biases
    in run_dir/wandb, offline unless WANDB_API_KEY or WANDB_MODE is set; extra wandb).
    (default: none, only metrics.jsonl and curves.png)"""

    def __post_init__(self) -> None:
        _at_least(self, 0, "steps", "keep_checkpoints")  # steps 0: SFT alone (TrainConfig)
        from agentgym_trainers.runlog import parse_trackers  # no torch: the CLI stays light

        parse_trackers(self.log_to)  # a bad name or a missing package fails here


@dataclass(frozen=True)
class TrainConfig:
    """Train an LLM policy on an agentgym env: GRPO, RLOO, REINFORCE or PPO from the env's
    own rewards, after an optional SFT warm start on the oracle's episodes (or SFT alone).
    Each step plays a batch of episodes with the current policy and updates it on them;
    run_dir gets metrics.jsonl, curves.png, checkpoints and the held-out evaluations. The
    options below are this config's fields, grouped by section."""

    algo: str = field(default="grpo", metadata={"choices": ALGOS})
    """grpo, rloo, reinforce, ppo (value head + GAE), or sft (oracle imitation only)."""
    data: DataConfig = field(default_factory=DataConfig)
    """The env and its tasks."""
    policy: PolicyConfig = field(default_factory=PolicyConfig)
    """The trained model and its device."""
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    """Episodes per step, generation and sampling."""
    optim: OptimConfig = field(default_factory=OptimConfig)
    """Optimizer, schedule and updates per rollout batch."""
    advantage: AdvantageConfig = field(default_factory=AdvantageConfig)
    """Discounts, baselines, GAE and whitening."""
    objective: LossConfig = field(default_factory=LossConfig)
    """Clipping, KL, entropy and value-loss terms."""
    sft: SFTConfig = field(default_factory=SFTConfig)
    """The SFT warm start."""
    eval: HeldOutEvalConfig = field(default_factory=HeldOutEvalConfig)
    """The evaluation before and after training."""
    run: RunConfig = field(default_factory=RunConfig)
    """Steps, output folder and checkpoints."""

    def __post_init__(self) -> None:
        """Each group checks its own fields when it is built; this checks what spans
        groups (and the algorithm's traits)."""
        for name, want in _GROUPS.items():
            got = getattr(self, name)
            if not isinstance(got, want):
                raise ConfigError(
                    f"TrainConfig.{name} must be a {want.__name__}, got {type(got).__name__}; "
                    "build a config from flat names with TrainConfig.from_flat(...)"
                )
        if self.algo not in ALGO_TRAITS:
            raise ConfigError(f"algo must be one of {ALGOS}, got {self.algo!r}")
        traits = ALGO_TRAITS[self.algo]
        if traits.rl and self.run.steps < 1:
            raise ConfigError(f"steps must be >= 1, got {self.run.steps}")
        if traits.needs_group and self.rollout.group_size < 2:
            raise ConfigError(f"{self.algo} compares rollouts of a group: set --group-size >= 2")
        if self.eval.split == VAL_SPLIT and self.data.val_tasks == 0 and self.eval.episodes:
            raise ConfigError(
                "--eval-split val evaluates the tasks held out by --val-tasks: set --val-tasks N"
            )
        if self.advantage.branch != "none":
            self._check_branch()
        if self.advantage.tool_credit > 0 and not traits.rl:
            raise ConfigError(
                f"--tool-credit lowers RL advantages, and algo {self.algo} runs no RL "
                "steps: drop --tool-credit or choose an RL --algo"
            )
        if not traits.rl and self.sft.steps < 1:
            raise ConfigError(f"algo {self.algo} needs --sft-steps >= 1")

    def _check_branch(self) -> None:
        a = self.advantage
        traits = ALGO_TRAITS[self.algo]
        if not traits.branch_credit:
            why = (
                f"{self.algo} credits turns with its critic (GAE)"
                if traits.needs_value_head
                else f"{self.algo} runs no RL steps"
            )
            able = ", ".join(n for n, t in ALGO_TRAITS.items() if t.branch_credit)
            raise ConfigError(
                f"--branch {a.branch} works with {able}, not {self.algo} "
                f"({why}): change --algo or use --branch none"
            )
        if self.rollout.rollout != "sync":
            raise ConfigError(
                f"--branch {a.branch} plays its branches after the step's episodes, which "
                "--rollout async does not do yet: use --rollout sync or --branch none"
            )

    @classmethod
    def from_flat(cls, **values: Any) -> TrainConfig:
        """Build a config from flat field names (the CLI's, ``to_json``'s, e.g.
        ``TrainConfig.from_flat(algo="ppo", sft_steps=4, lr=1e-4)``); unset fields keep
        their defaults.

        Raises:
            ConfigError: a name that is no flat field (the closest names are suggested).
        """
        fields = flat_fields(cls)
        unknown = sorted(set(values) - set(fields))
        if unknown:
            hints = {n: difflib.get_close_matches(n, list(fields), n=1) for n in unknown}
            said = ", ".join(
                f"{n!r}" + (f" (did you mean {h[0]!r}?)" if h else "") for n, h in hints.items()
            )
            raise ConfigError(
                f"TrainConfig has no field {said}; expected flat names such as "
                f"'lr' or 'sft_steps' (agentgym train --help lists them all)"
            )
        top: dict[str, Any] = {}
        nested: dict[str, dict[str, Any]] = {}
        for flat, value in values.items():
            group, name = fields[flat]
            if group is None:
                top[name] = value
            else:
                nested.setdefault(group, {})[name] = value
        config: TrainConfig = cls(**top, **{g: _GROUPS[g](**kw) for g, kw in nested.items()})
        return config

    def replace(self, **values: Any) -> TrainConfig:
        """A copy with some flat fields changed (``cfg.replace(micro_batch_size=2)``)."""
        return self.from_flat(**{**self.to_json(), **values})

    def to_json(self) -> dict[str, Any]:
        """Every field under its flat name (the keys of ``summary.json`` and checkpoints;
        :meth:`from_flat` reads them back)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if dataclasses.is_dataclass(value) and not isinstance(value, type):
                prefix = getattr(value, "PREFIX", "")
                out.update({prefix + k: v for k, v in dataclasses.asdict(value).items()})
            else:
                out[f.name] = value
        return out


_GROUPS: dict[str, type] = {
    "data": DataConfig,
    "policy": PolicyConfig,
    "rollout": RolloutConfig,
    "optim": OptimConfig,
    "advantage": AdvantageConfig,
    "objective": LossConfig,
    "sft": SFTConfig,
    "eval": HeldOutEvalConfig,
    "run": RunConfig,
}
"""TrainConfig's nested groups by attribute."""


# -- the flat view --------------------------------------------------------------------------


def _walk(cls: type) -> Iterator[tuple[str, str | None, dataclasses.Field[Any], type]]:
    """``(flat name, group attribute or None, field, owning class)`` of every leaf field,
    in declaration order: a field whose type is a dataclass is a group of leaves."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kind = hints[f.name]
        if isinstance(kind, type) and dataclasses.is_dataclass(kind):
            prefix = getattr(kind, "PREFIX", "")
            for leaf in dataclasses.fields(kind):
                yield prefix + leaf.name, f.name, leaf, kind
        else:
            yield f.name, None, f, cls


def flat_fields(cls: type = TrainConfig) -> dict[str, tuple[str | None, str]]:
    """Map each flat name to ``(group attribute or None, field name in the group)``."""
    out: dict[str, tuple[str | None, str]] = {}
    for flat, group, f, _ in _walk(cls):
        assert flat not in out, f"two fields have the flat name {flat!r}"
        out[flat] = (group, f.name)
    return out


def field_docs(cls: type) -> dict[str, str]:
    """Map each dataclass field to the string literal written under it."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs: dict[str, str] = {}
    for node, after in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[node.target.id] = " ".join(after.value.value.split())
    return docs


def flat_docs(cls: type = TrainConfig) -> dict[str, str]:
    """Map each flat name to its field's docstring (the ``--help`` text)."""
    docs: dict[type, dict[str, str]] = {}
    out: dict[str, str] = {}
    for flat, _, f, owner in _walk(cls):
        if owner not in docs:
            docs[owner] = field_docs(owner)
        out[flat] = docs[owner].get(f.name, "")
    return out


# -- the command line -----------------------------------------------------------------------


def _parser_type(tp: Any) -> tuple[Any, dict[str, Any]]:
    """argparse ``type``/``choices`` for a field annotation."""
    origin = typing.get_origin(tp)
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if origin is Literal:
        return str, {"choices": list(typing.get_args(tp))}
    if args and origin is not dict and origin is not None:  # X | None
        inner, extra = _parser_type(args[0])
        return (lambda text: None if text.lower() == "none" else inner(text)), extra
    if tp is bool:
        return _bool, {}
    if origin is dict:
        return _json_object, {}
    return tp, {}


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")


def _json_object(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise argparse.ArgumentTypeError(f"not JSON ({exc}): {text!r}") from exc
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError(f"expected a JSON object, got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser, cls: type = TrainConfig) -> None:
    """One ``--flag`` per leaf field, named after its flat name, with the field's docstring
    as help; the fields of a nested group are listed under the group's docstring."""
    docs = flat_docs(cls)
    sections: dict[str | None, Any] = {None: parser}
    hints: dict[type, dict[str, Any]] = {}
    for flat, group, f, owner in _walk(cls):
        if group not in sections:
            sections[group] = parser.add_argument_group(group, owner.__doc__)
        if owner not in hints:
            hints[owner] = typing.get_type_hints(owner)
        hint = hints[owner][f.name]
        kind, extra = _parser_type(hint)
        if "choices" in f.metadata:  # a str field whose values a table declares (algo)
            extra["choices"] = list(f.metadata["choices"])
        factory: Any = f.default_factory
        default = f.default if f.default is not dataclasses.MISSING else factory()
        if hint is bool:
            extra["nargs"] = "?"
            extra["const"] = True
        # the default is shown once: here, unless the docstring already names it (so no
        # parser should add its own, e.g. argparse.ArgumentDefaultsHelpFormatter)
        shown = json.dumps(default) if isinstance(default, dict) else default
        doc = docs[flat] if "(default:" in docs[flat] else f"{docs[flat]} (default: {shown})"
        sections[group].add_argument(
            "--" + flat.replace("_", "-"),
            action=_Store,
            dest=flat,
            type=kind,
            default=default,
            help=doc.replace("%", "%%"),  # argparse %-formats help text
            **extra,
        )


GIVEN = "_given_flags"
"""The namespace attribute where :class:`_Store` records the flags given on the command line."""


class _Store(argparse.Action):
    """``store``, and note that the flag was given (so a config file yields to it)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        setattr(namespace, self.dest, values)
        setattr(namespace, GIVEN, getattr(namespace, GIVEN, frozenset()) | {self.dest})


def from_args(
    args: argparse.Namespace,
    cls: type[TrainConfig] = TrainConfig,
    under: Mapping[str, Any] | None = None,
) -> TrainConfig:
    """Build the config from parsed arguments (validation errors name the flag), and
    check its env (:meth:`~agentgym_trainers.env_spec.EnvSpec.parse`): a wrong env id or
    env setting fails here, before any model loads.

    Args:
        args: what :func:`add_arguments`' flags parsed.
        cls: the config class.
        under: flat settings (a config file's) that flags given on the command line
            override and that override the defaults.
    """
    given: frozenset[str] = getattr(args, GIVEN, frozenset())
    values = {flat: getattr(args, flat) for flat in flat_fields(cls)}
    values.update({k: v for k, v in (under or {}).items() if k not in given})
    config = cls.from_flat(**values)
    config.data.env_spec()
    return config


def parse(argv: Sequence[str] | None = None) -> TrainConfig:
    parser = argparse.ArgumentParser(prog="agentgym train", description=TrainConfig.__doc__)
    add_arguments(parser)
    return from_args(parser.parse_args(argv))
