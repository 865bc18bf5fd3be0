"""The ``algo`` name -> algorithm family class. Adding an algorithm is one entry here (and
its name in :data:`agentgym_trainers.config.Algo`, the command line's choices)."""

from __future__ import annotations

import difflib

from agentgym_envs.core.errors import ConfigError
from agentgym_trainers.algorithms.base import Algorithm, Learner
from agentgym_trainers.algorithms.group import GRPO, RLOO
from agentgym_trainers.algorithms.ppo import PPO
from agentgym_trainers.algorithms.reinforce import Reinforce
from agentgym_trainers.algorithms.sft import SFT
from agentgym_trainers.config import TrainConfig

ALGORITHMS: dict[str, type[Algorithm]] = {
    "grpo": GRPO,
    "rloo": RLOO,
    "reinforce": Reinforce,
    "ppo": PPO,
    "sft": SFT,
}


def algorithm_class(name: str) -> type[Algorithm]:
    """The class registered for ``name``.

    Raises:
        ConfigError: no such name (the closest one is suggested).
    """
    if name not in ALGORITHMS:
        close = difflib.get_close_matches(name, list(ALGORITHMS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"no algorithm {name!r}: expected one of {sorted(ALGORITHMS)}{hint}")
    return ALGORITHMS[name]


def make_algorithm(cfg: TrainConfig, learner: Learner) -> Algorithm:
    """The algorithm ``cfg.algo`` names, bound to ``learner``."""
    return algorithm_class(cfg.algo)(cfg, learner)
