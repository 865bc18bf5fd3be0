"""The run's rollout engine, sampler and runner, built from its config.

The learner builds its own here, and so does a rollout worker's copy of the policy (the
in-process thread worker through the trainer, the Ray rollout actor from the config it
is sent), so both sample and play with the same settings.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import torch

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.llm.chat import ChatFormat
from agentgym_envs.llm.engine import StaticEngine, supports
from agentgym_envs.llm.generation import Generator
from agentgym_envs.llm.sampler import Sampler
from agentgym_envs.rollout import EnvSlots
from agentgym_envs.rollout.episodes import RolloutRunner
from agentgym_trainers.config import TrainConfig


def rollout_engine(
    cfg: TrainConfig, lm: torch.nn.Module, cuda_graphs: bool = True
) -> StaticEngine | None:
    """The static-KV-cache engine over ``lm`` when ``--generation`` picks it (None: the
    transformers forward). A copy of the policy that samples beside the learner (the
    asynchronous worker's) gets ``cuda_graphs=False``.

    Raises:
        ConfigError: ``--generation static`` with a model the engine does not support.
    """
    mode = cfg.rollout.generation
    if mode == "hf" or (mode == "auto" and not supports(lm)):
        return None
    if not supports(lm):
        raise ConfigError(
            f"--generation static supports Llama-family models, not "
            f"{type(lm).__name__}; use --generation hf (or auto)"
        )
    return StaticEngine(
        lm, max_batch=cfg.rollout.n_envs, max_len=cfg.rollout.max_context, cuda_graphs=cuda_graphs
    )


def rollout_sampler(
    cfg: TrainConfig,
    lm: torch.nn.Module,
    chat: ChatFormat,
    rank: int = 0,
    engine: StaticEngine | None = None,
) -> Sampler:
    """The rollout sampler of process ``rank`` over ``lm``, with the run's sampling
    settings (the learner's and the Ray rollout actor's are built here alike)."""
    r = cfg.rollout
    return Sampler(
        lm,
        eos_ids=[chat.eos_id],
        pad_id=chat.pad_id,
        temperature=r.temperature,
        top_p=r.top_p,
        seed=r.sampling_seed * 1000 + rank,
        engine=engine,
    )


def rollout_runner(
    cfg: TrainConfig,
    chat: ChatFormat,
    make_env: Callable[[], gym.Env[Any, Any]],
    generator: Generator,
    slots: EnvSlots | None = None,
) -> RolloutRunner:
    """A rollout runner with the run's settings around ``generator``: ``n_envs`` envs
    from ``make_env`` in this process, or ``slots`` (a Ray env pool)."""
    r = cfg.rollout
    return RolloutRunner(
        make_env,
        chat,
        generator,
        n_envs=r.n_envs,
        max_new_tokens=r.max_new_tokens,
        max_context=r.max_context,
        context_policy=r.context_policy,
        system_prompt=r.system_prompt,
        slots=slots,
    )


__all__ = ["rollout_engine", "rollout_runner", "rollout_sampler"]
