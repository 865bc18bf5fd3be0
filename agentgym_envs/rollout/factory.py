"""Opening env slots by where they live (:class:`SlotIsolation`)."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.rollout.local import LocalEnvSlots
from agentgym_envs.rollout.process import ProcessEnvSlots
from agentgym_envs.rollout.ray_slots import RayEnvSlots
from agentgym_envs.rollout.slots import EnvFactory, EnvSlots


class SlotIsolation(StrEnum):
    """Where env slots run."""

    INLINE = "inline"  # in this process: an exception from the env ends its episode
    PROCESS = "process"  # one worker process per slot: crashes and hangs end it too
    RAY = "ray"  # slots on Ray actors (the dist extra), across a cluster's nodes

    @classmethod
    def parse(cls, value: SlotIsolation | str) -> SlotIsolation:
        """The member for ``value`` (a member or its string, as CLIs and configs give).

        Raises:
            ConfigError: no member has this value.
        """
        try:
            return cls(value)
        except ValueError:
            names = " or ".join(repr(m.value) for m in cls)
            raise ConfigError(f"isolation must be {names}, got {value!r}") from None


def make_slots(
    factory: EnvFactory,
    count: int,
    isolation: SlotIsolation | str,
    step_timeout_s: float = 300.0,
    *,
    strict: bool = True,
    env_id: str = "",
    envs_per_actor: int = 1,
    ray_address: str = "",
    store: Any = None,
) -> EnvSlots:
    """``count`` env slots built by ``factory``.

    Args:
        factory: builds one env (picklable for process and ray isolation).
        count: slots.
        isolation: where the slots run (:class:`SlotIsolation`).
        step_timeout_s: with process or ray isolation, a slower step ends its worker.
        strict: a ConfigError the env raises is raised (else it ends its episode; see
            :class:`~agentgym_envs.rollout.local.LocalEnvSlots`).
        env_id: the env ``factory`` builds (ray: picks the family's actor resources).
        envs_per_actor: ray: slots hosted by one actor.
        ray_address: ray: the cluster to join (default: connected, or a local Ray).
        store: ray: the run's open trajectory store; ``factory``'s envs record into an
            :class:`~agentgym_envs.distributed.host.EpisodeOutbox` and the slots write
            the episodes that come back here.

    Raises:
        ConfigError: ``isolation`` is not a :class:`SlotIsolation` value, or (ray) ray
            is missing or the pool's configuration is bad.
    """
    kind = SlotIsolation.parse(isolation)
    if kind is SlotIsolation.INLINE:
        return LocalEnvSlots(factory, count, strict=strict)
    if kind is SlotIsolation.PROCESS:
        return ProcessEnvSlots(factory, count, step_timeout_s, strict=strict)
    from agentgym_envs.distributed.pool import RayEnvPool

    pool = RayEnvPool(
        env_id or None,
        count,
        factory=factory,
        envs_per_actor=envs_per_actor,
        step_timeout_s=step_timeout_s,
        address=ray_address or None,
    )
    return RayEnvSlots(pool, strict=strict, store=store)


__all__ = ["SlotIsolation", "make_slots"]
