"""The env a run trains on, typed: its id, its reward weights and its other ``gym.make``
keyword arguments, checked when the command line is parsed.

``--env`` and ``--env-kwargs`` stay what the command line, ``summary.json`` and
checkpoints hold (an id and a JSON object). :meth:`EnvSpec.parse` reads them into an
:class:`EnvSpec`, so an unknown env id, a keyword the env does not take or a bad reward
setting fails before any model loads, with a message that names the fix, rather than
when the first env is made or reset.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
from gymnasium.envs.registration import load_env_creator

import agentgym_envs  # noqa: F401  (registers the agentgym/ envs)
from agentgym_envs.core.env import AgentEnv
from agentgym_envs.core.errors import ConfigError, did_you_mean
from agentgym_envs.core.rewards import RewardConfig, reward_config_from
from agentgym_envs.core.validation import check_kwargs
from agentgym_trainers.envs import register

TRAINABLE = ("agentgym/", "agentgym-train/")
"""The namespaces of the envs a run can train on (the suggestions for a wrong id)."""


@dataclass(frozen=True)
class EnvSpec:
    """One env, typed.

    Attributes:
        id: the registered env id (``agentgym/FrozenLake-v0``).
        reward: the reward weights (``env_kwargs["reward_config"]``; the default when
            it is not set).
        kwargs: the other ``gym.make`` keyword arguments.
    """

    id: str
    reward: RewardConfig = field(default_factory=RewardConfig)
    kwargs: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, env: str, env_kwargs: Mapping[str, Any]) -> EnvSpec:
        """Check ``--env`` and ``--env-kwargs`` and type them.

        Raises:
            ConfigError: the id is not registered (the closest is suggested), the env's
                constructor takes no such keyword, or ``reward_config`` has an unknown
                field, a non-numeric weight or weights that break its invariants.
        """
        register()  # the trainer's own fixture envs (agentgym-train/)
        if env not in gym.registry:
            trainable = [k for k in gym.registry if k.startswith(TRAINABLE)]
            raise ConfigError(
                f"--env {env!r} is not a registered env id.{did_you_mean(env, trainable)} "
                "`agentgym list` shows the agentgym/ ids; the trainer's own fixture is "
                "agentgym-train/DigitFraction-v0"
            )
        entry = gym.spec(env).entry_point
        creator = load_env_creator(entry) if isinstance(entry, str) else entry
        kwargs = dict(env_kwargs)
        if isinstance(creator, type) and issubclass(creator, AgentEnv):
            try:  # the same check as the env's constructor, before anything is made
                check_kwargs(creator, {**gym.spec(env).kwargs, **kwargs})
            except ConfigError as exc:
                raise ConfigError(f"--env-kwargs for {env}: {exc}") from exc
        given = kwargs.pop("reward_config", None)
        try:
            reward = reward_config_from(given)
        except ConfigError as exc:
            raise ConfigError(f"--env-kwargs reward_config: {exc}") from exc
        return cls(id=env, reward=reward, kwargs=kwargs)
