"""The SQLite business simulators: ``retail`` and ``calendar``, on a shared base.

Shared here: the env base (:mod:`.base`), tool groups (:mod:`.toolsets`), the generic
rules (:mod:`.rules`) and policy documents (:mod:`.policy`), the simulated user
(:mod:`.user`, :mod:`.answers`), the episode databases (:mod:`.db`), the episode's plain
data (:mod:`.episode`) and the oracle (:mod:`.oracle`).

:data:`FAMILY` is what the shared layers know of the family
(:class:`~agentgym_envs.core.family.Family`); importing this package imports no env.
"""

from agentgym_envs.core.family import Family, FamilyCost

FAMILY = Family(
    name="business",
    package=__name__,
    cost=FamilyCost(cpus_per_env=0.25, memory_mib_base=200, memory_mib_per_env=20),
    redteam="agentgym_envs.redteam.business:attacks",
    injection={
        "Retail": "agentgym_envs.business.injection:retail",
        "Calendar": "agentgym_envs.business.injection:calendar",
    },
    endpoint_kwargs=("user_base_url",),
)

__all__ = ["FAMILY"]
