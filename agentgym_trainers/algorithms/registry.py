"""The ``algo`` name -> algorithm family class, read from
:data:`agentgym_trainers.config.ALGO_TRAITS` (each entry names its class as
``module:Class``). Adding an algorithm is its module plus its entry there, which also
gives the command line's choices."""

from __future__ import annotations

import difflib
import importlib
from typing import TYPE_CHECKING

from agentgym_envs.core.errors import ConfigError
from agentgym_trainers.algorithms.base import Algorithm, Learner
from agentgym_trainers.config import ALGO_TRAITS

if TYPE_CHECKING:
    from agentgym_trainers.config import TrainConfig


def load(name: str, impl: str) -> type[Algorithm]:
    """The class ``impl`` (``module:Class``) names, checked to be ``name``'s algorithm.

    Raises:
        ConfigError: ``impl`` is malformed, does not import, or is not an
            :class:`Algorithm` registered under ``name``.
    """
    module, _, attr = impl.partition(":")
    if not module or not attr:
        raise ConfigError(f"algorithm {name!r}: impl {impl!r} must be 'module:Class'")
    try:
        cls = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"algorithm {name!r}: cannot import {impl!r}: {e}") from e
    if not (isinstance(cls, type) and issubclass(cls, Algorithm) and cls.name == name):
        raise ConfigError(f"algorithm {name!r}: {impl!r} is not an Algorithm named {name!r}")
    return cls


ALGORITHMS: dict[str, type[Algorithm]] = {
    name: load(name, traits.impl) for name, traits in ALGO_TRAITS.items()
}


def algorithm_class(name: str) -> type[Algorithm]:
    """The class registered for ``name``.

    Raises:
        ConfigError: no such name (the closest one is suggested).
    """
    if name not in ALGORITHMS and name in ALGO_TRAITS:  # an entry added after import
        ALGORITHMS[name] = load(name, ALGO_TRAITS[name].impl)
    if name not in ALGORITHMS:
        close = difflib.get_close_matches(name, list(ALGORITHMS), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"no algorithm {name!r}: expected one of {sorted(ALGORITHMS)}{hint}")
    return ALGORITHMS[name]


def make_algorithm(cfg: TrainConfig, learner: Learner) -> Algorithm:
    """The algorithm ``cfg.algo`` names, bound to ``learner``."""
    return algorithm_class(cfg.algo)(cfg, learner)
