"""What one env actor asks the Ray scheduler for, per env family (plain data, no ray).

An actor hosts ``envs_per_actor`` envs, so its request is a fixed part (the process,
and for a browser env the browser every env of the process shares) plus a part per env.
Each built-in family declares its cost in its record (``Family.cost``,
:mod:`agentgym_envs.core.family`); pass ``resources=`` to the pool to override it.
Memory is what Ray reserves for scheduling (``memory=``), not a hard limit; the figures
come from ``agentgym bench``.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from agentgym_envs.core.errors import ConfigError
from agentgym_envs.core.family import FamilyCost
from agentgym_envs.registration import families, family, find

MIB = 2**20


@dataclass(frozen=True)
class ActorResources:
    """The Ray resources one env actor asks for.

    Attributes:
        num_cpus: CPU cores (fractions allowed: 0.25 packs four actors on a core).
        memory_mib: memory Ray reserves for the actor when placing it (0: none).
        custom: custom node resources, e.g. ``{"browser_node": 1}`` to pin actors to
            nodes started with ``ray start --resources='{"browser_node": 8}'``.
    """

    num_cpus: float = 1.0
    memory_mib: int = 0
    custom: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.num_cpus < 0 or self.memory_mib < 0:
            raise ConfigError(
                f"actor resources must be >= 0, got num_cpus={self.num_cpus} and "
                f"memory_mib={self.memory_mib}; e.g. ActorResources(num_cpus=0.5, memory_mib=512)"
            )
        for name, amount in self.custom.items():
            if not isinstance(name, str) or not name or amount <= 0:
                raise ConfigError(
                    f"custom resources map a name to an amount > 0, got {name!r}: {amount!r}; "
                    'e.g. custom={"node2": 0.5}'
                )
        object.__setattr__(self, "custom", MappingProxyType(dict(self.custom)))

    def ray_options(self) -> dict[str, Any]:
        """The keyword arguments of ``ActorClass.options`` for this request."""
        options: dict[str, Any] = {"num_cpus": self.num_cpus}
        if self.memory_mib:
            options["memory"] = self.memory_mib * MIB
        if self.custom:
            options["resources"] = dict(self.custom)
        return options

    @classmethod
    def for_family(cls, cost: FamilyCost, envs_per_actor: int) -> ActorResources:
        """The request of an actor that hosts ``envs_per_actor`` envs of a family that
        costs ``cost``."""
        return cls(
            num_cpus=round(cost.cpus_per_env * envs_per_actor, 3),
            memory_mib=cost.memory_mib_base + cost.memory_mib_per_env * envs_per_actor,
        )

    def demand(self) -> dict[str, float]:
        """The request in Ray's resource names (``CPU``, ``memory`` in bytes, custom)."""
        out = {"CPU": float(self.num_cpus), **{k: float(v) for k, v in self.custom.items()}}
        if self.memory_mib:
            out["memory"] = float(self.memory_mib * MIB)
        return {k: v for k, v in out.items() if v > 0}


FAMILY_COSTS: Mapping[str, FamilyCost] = MappingProxyType({f.name: f.cost for f in families()})
"""The built-in families' costs, by family (read from their records); families without
a record (plugins) get :data:`DEFAULT_COST`."""

DEFAULT_COST = FamilyCost(cpus_per_env=0.5, memory_mib_base=200, memory_mib_per_env=50)


def default_resources(env_id: str, envs_per_actor: int) -> ActorResources:
    """The default request of an actor hosting ``envs_per_actor`` envs of ``env_id``
    (:data:`DEFAULT_COST` for envs outside the agentgym registry)."""
    from agentgym_envs.core.errors import EnvNotFoundError

    try:
        record = family(find(env_id).family)
    except EnvNotFoundError:
        record = None
    cost = record.cost if record is not None else DEFAULT_COST
    return ActorResources.for_family(cost, envs_per_actor)


def check_env_id(env_id: str) -> str:
    """The id ``gym.make`` takes for ``env_id`` (an agentgym name such as ``Retail``
    becomes ``agentgym/Retail-v1``); checked before any actor starts, so a typo fails
    at once.

    Raises:
        EnvNotFoundError: naming the closest registered agentgym id.
    """
    import gymnasium as gym

    import agentgym_envs  # noqa: F401  (registers the envs)
    from agentgym_envs.core.errors import EnvNotFoundError

    try:
        return find(env_id).id
    except EnvNotFoundError as exc:
        missing = exc
    module, _, name = env_id.rpartition(":")
    try:
        if module:  # "package.module:Env-v0", as gym.make takes it: import, then look up
            importlib.import_module(module)
        gym.spec(name)  # registered outside agentgym (a plugin's, a test's, gymnasium's)
    except (ImportError, gym.error.Error):
        raise missing from None
    return env_id


def unmet(demand: Mapping[str, float], nodes: list[Mapping[str, Any]]) -> str:
    """Why no alive node of ``nodes`` (``ray.nodes()``) can host an actor asking for
    ``demand``, or "" when one can (by total capacity; busy nodes free up later)."""
    alive = [n for n in nodes if n.get("Alive", n.get("alive", False))]
    for node in alive:
        totals = node.get("Resources") or {}
        if all(totals.get(k, 0.0) + 1e-9 >= v for k, v in demand.items()):
            return ""
    offers = "; ".join(
        ", ".join(
            f"{k}={_shown(k, v)}"
            for k, v in sorted((n.get("Resources") or {}).items())
            if not k.startswith("node:") and k != "object_store_memory"
        )
        for n in alive
    )
    wanted = ", ".join(f"{k}={_shown(k, v)}" for k, v in sorted(demand.items()))
    return f"each actor asks for {wanted}, but no node offers that (nodes offer: {offers})"


def _shown(name: str, value: float) -> str:
    return f"{value / MIB:.0f}MiB" if name == "memory" else f"{value:g}"


__all__ = [
    "DEFAULT_COST",
    "FAMILY_COSTS",
    "ActorResources",
    "FamilyCost",
    "check_env_id",
    "default_resources",
    "unmet",
]
