"""The ``Policy`` protocol that every policy (scripted or LLM) implements."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import gymnasium as gym

from agentgym_envs.core.errors import ConfigError, did_you_mean


@runtime_checkable
class Policy(Protocol):
    """A batched policy: a list of observations in, a list of action texts out.

    ``slots[i]`` names the env slot that ``observations[i]`` comes from; a slot keeps
    its number for a whole episode, and finished slots are left out of the batch.
    ``reset(indices)`` says which slots start a new episode (so stateful policies, such
    as LLMs with a chat history, can clear them); their infos then carry ``system``.
    """

    name: str

    def reset(self, indices: Sequence[int]) -> None:
        """Forget any per-episode state of these slots."""
        ...

    def act(
        self,
        observations: Sequence[str],
        infos: Sequence[Mapping[str, Any]],
        slots: Sequence[int] | None = None,
    ) -> list[str]:
        """Return one action text per observation (``slots`` defaults to 0..n-1)."""
        ...


POLICIES = ("oracle", "random", "noop")


def make_policy(name: str, envs: Sequence[gym.Env[Any, Any]], seed: int = 0) -> Policy:
    """Build a reference policy by name for these env slots.

    Raises:
        ConfigError: unknown name (with the closest match).
    """
    from agentgym_envs.policies.reference import NoopPolicy, OraclePolicy, RandomPolicy

    if name == "oracle":
        return OraclePolicy(envs)
    if name == "random":
        return RandomPolicy(seed=seed)
    if name == "noop":
        return NoopPolicy(envs)
    raise ConfigError(f"unknown policy {name!r}.{did_you_mean(name, POLICIES)} Known: {POLICIES}")
