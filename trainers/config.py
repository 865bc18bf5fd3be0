"""The trainer's one configuration dataclass, and the command line generated from it.

Each field's docstring (the string literal under it) is its ``--help`` text: the CLI is
read from this file, so the two cannot drift apart.
"""

from __future__ import annotations

import argparse
import ast
import dataclasses
import inspect
import itertools
import json
import textwrap
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from agentgym_envs.core.errors import ConfigError

Algo = Literal["grpo", "rloo", "reinforce", "ppo", "sft"]
ALGOS: tuple[str, ...] = typing.get_args(Algo)


@dataclass(frozen=True)
class TrainConfig:
    """Everything a training run needs; ``agentgym train --help`` lists it."""

    env: str = "agentgym/FrozenLake-v0"
    """Env id to train on (any registered agentgym/ or agentgym-train/ id)."""
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    """Keyword arguments for gym.make, as JSON (e.g. '{"difficulty": "easy"}')."""
    split: str = "train"
    """Task split that training samples from."""
    difficulty: str | None = None
    """Only train on tasks of this difficulty (default: all)."""
    eval_split: str = "test"
    """Held-out split for the before/after evaluation."""
    algo: Algo = "grpo"
    """grpo, rloo, reinforce, ppo (value head + GAE), or sft (oracle imitation only)."""
    model: str = "smollm2"
    """'smollm2' (default policy), 'tiny' (random test model), an HF folder or a .gguf file."""
    device: str = "auto"
    """'auto' (cuda if available), 'cpu' or 'cuda[:n]'."""
    steps: int = 20
    """RL steps (each: one rollout batch, then its optimizer updates)."""
    time_budget_s: float = 0.0
    """Stop RL after this many seconds of training (0: no limit; steps still applies)."""
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
    generation: Literal["auto", "static", "hf"] = "auto"
    """Rollout generation: 'static' KV-cache engine (CUDA graphs on GPU; Llama-family
    models), 'hf' (transformers forward, any model), 'auto' (static when supported)."""
    temperature: float = 1.0
    """Sampling temperature."""
    top_p: float = 1.0
    """Nucleus sampling mass."""
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
    epochs: int = 1
    """Passes over each rollout batch."""
    minibatches: int = 1
    """Optimizer steps per pass; later ones are off-policy by one version each."""
    micro_batch_size: int = 4
    """Sequences per forward/backward (does not change the gradient)."""
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
    clip_low: float = 0.2
    """Ratio clip below: 1 - clip_low."""
    clip_high: float = 0.28
    """Ratio clip above: 1 + clip_high."""
    dual_clip: float | None = None
    """Dual-clip constant c > 1 for negative advantages (off by default)."""
    kl_coef: float = 0.0
    """Coefficient of the KL to the reference: the policy when RL starts, after the SFT
    warm start (0: no reference model)."""
    kl_estimator: Literal["k1", "k2", "k3"] = "k3"
    """Per-token KL estimator: k1 = logp - ref, k2 = (logp - ref)^2/2, k3 = e^d - d - 1."""
    kl_in_reward: bool = False
    """Charge the KL as a per-token reward penalty (computed once on the rollout's tokens,
    before advantages) instead of as a loss term."""
    loss_agg: Literal["token-mean", "seq-mean", "constant"] = "token-mean"
    """How token losses are averaged: over all agent tokens of the step, per sequence then
    over sequences, or divided by the constant sequences x max_new_tokens (Dr. GRPO)."""
    target_kl: float = 0.0
    """Stop a batch's remaining epochs/minibatches once the approximate KL between the
    updated and the sampling policy exceeds this (0: never)."""
    entropy_coef: float = 0.0
    """Entropy bonus coefficient."""
    vf_coef: float = 0.5
    """Value loss coefficient (ppo)."""
    vf_lr: float = 0.0
    """Learning rate of the value head (ppo; 0: lr x 10, a critic that starts at zero
    must catch up with the returns before its baseline helps)."""
    value_detach: bool = False
    """Train the value head on detached trunk features, so the critic's loss never moves
    the policy's weights (ppo)."""
    vf_clip: float | None = 0.2
    """Value clipping range (ppo)."""
    max_lag: int = 1
    """Drop samples whose sampler weights are more than this many policy versions behind
    the learner's (a version is one rollout batch's updates; epochs and minibatches over
    one batch are never stale)."""
    tis_cap: float = 2.0
    """Truncated importance sampling cap C in min(pi_old/mu, C)."""
    baseline_decay: float = 0.9
    """REINFORCE running-baseline decay."""
    curriculum_alpha: float = 1.0
    """Task weights [p(1-p)]^alpha from running success p (0: uniform)."""
    curriculum_floor: float = 0.05
    """Smallest relative task weight, so no task is ever excluded."""
    sft_steps: int = 0
    """Oracle-imitation optimizer steps before RL (the SFT warm start)."""
    sft_episodes: int = 64
    """Oracle episodes of the train split collected for SFT."""
    sft_lr: float = 1e-4
    """SFT learning rate."""
    eval_episodes: int = 0
    """Episodes of eval_split to evaluate before and after training (0: skip)."""
    eval_temperature: float = 0.0
    """Sampling temperature of the evaluation (0: greedy)."""
    seed: int = 0
    """Seed of task sampling and env seeds."""
    sampling_seed: int = 0
    """Seed of the policy's token sampling (separate from env seeds)."""
    run_dir: str = "runs/latest"
    """Output folder: metrics.jsonl, trajectories.sqlite, curves.png, checkpoints/."""
    checkpoint_every: int = 0
    """Save a checkpoint every N steps (0: only at the end)."""
    keep_checkpoints: int = 3
    """Keep the newest K checkpoints and delete older ones (0: keep all)."""
    resume: bool = False
    """Continue from the newest checkpoint in run_dir."""

    def __post_init__(self) -> None:
        positive = ("steps", "tasks_per_step", "group_size", "n_envs", "max_new_tokens")
        for name in (*positive, "max_context", "epochs", "minibatches", "micro_batch_size"):
            if getattr(self, name) < 1 and not (name == "steps" and self.algo == "sft"):
                raise ConfigError(f"{name} must be >= 1, got {getattr(self, name)}")
        if self.algo not in ALGOS:
            raise ConfigError(f"algo must be one of {ALGOS}, got {self.algo!r}")
        if self.algo in ("grpo", "rloo") and self.group_size < 2:
            raise ConfigError(f"{self.algo} compares rollouts of a group: set --group-size >= 2")
        if self.max_new_tokens >= self.max_context:
            raise ConfigError("max_new_tokens must be smaller than max_context")
        if self.target_kl < 0 or self.vf_lr < 0 or self.keep_checkpoints < 0:
            raise ConfigError("target_kl, vf_lr and keep_checkpoints must be >= 0")
        if self.kl_in_reward and self.kl_coef <= 0:
            raise ConfigError("kl_in_reward needs --kl-coef > 0 (the penalty's weight)")
        if self.warmup_steps < 0:
            raise ConfigError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.max_lag < 0 or self.tis_cap < 1.0:
            raise ConfigError("max_lag must be >= 0 and tis_cap >= 1")
        if not 0.0 <= self.gamma <= 1.0 or not 0.0 <= self.lam <= 1.0:
            raise ConfigError("gamma and lam must be in [0, 1]")
        if self.time_discount < 0:
            raise ConfigError("time_discount must be >= 0 (a rate per second)")
        if self.algo == "sft" and self.sft_steps < 1:
            raise ConfigError("algo sft needs --sft-steps >= 1")

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


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
    """One ``--flag`` per field, with the field's docstring as help."""
    docs = field_docs(cls)
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls):
        kind, extra = _parser_type(hints[f.name])
        factory: Any = f.default_factory
        default = f.default if f.default is not dataclasses.MISSING else factory()
        flag = "--" + f.name.replace("_", "-")
        if hints[f.name] is bool:
            extra["nargs"] = "?"
            extra["const"] = True
        shown = json.dumps(default) if isinstance(default, dict) else default
        parser.add_argument(
            flag,
            dest=f.name,
            type=kind,
            default=default,
            help=f"{docs.get(f.name, '')} (default: {shown})",
            **extra,
        )


def from_args(args: argparse.Namespace, cls: type = TrainConfig) -> Any:
    """Build the config from parsed arguments (validation errors name the flag)."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(cls)}
    return cls(**values)


def parse(argv: Sequence[str] | None = None) -> TrainConfig:
    parser = argparse.ArgumentParser(prog="agentgym train", description=TrainConfig.__doc__)
    add_arguments(parser)
    config: TrainConfig = from_args(parser.parse_args(argv))
    return config
