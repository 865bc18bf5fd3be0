"""Text games: Sokoban, FrozenLake and Dungeon (pure Python, no extra dependency).

:data:`FAMILY` is what the shared layers know of the family
(:class:`~agentgym_envs.core.family.Family`); importing this package imports no game.
"""

from agentgym_envs.core.family import Family, FamilyCost

FAMILY = Family(
    name="games",
    package=__name__,
    cost=FamilyCost(cpus_per_env=0.25, memory_mib_base=150, memory_mib_per_env=5),
    bench_machinery=True,
    redteam="agentgym_envs.redteam.games:attacks",
    injection={
        "Dungeon": "agentgym_envs.games.injection:dungeon",
        "FrozenLake": "agentgym_envs.games.injection:frozenlake",
        "Sokoban": "agentgym_envs.games.injection:sokoban",
    },
)

__all__ = ["FAMILY"]
